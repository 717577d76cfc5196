//! A streaming standby of a test cluster, set up the way PostgreSQL 17 needs
//! it to keep failover slots (docs/operations.md, "Failover") or the way
//! PostgreSQL 16+ needs it to decode on it ("Decoding on a standby"), and the
//! crash and promotion of a failover. The npm server builds ship no
//! pg_basebackup, so the standby starts from a copy of the cleanly stopped
//! primary.

use std::process::Command;
use std::time::Duration;

use super::pg::{is_root, pg_command, run};
use super::{eventually, free_port, Postgres, TempDir};

impl Postgres {
    /// Makes a standby of this cluster that streams through the physical slot
    /// `slot` and synchronises failover slots; lists `slot` in this cluster's
    /// `synchronized_standby_slots`. Stops this cluster for a moment.
    pub async fn start_standby(&mut self, slot: &str) -> Postgres {
        self.standby_through(slot, true).await
    }

    /// Makes a standby of this cluster to decode on (PostgreSQL 16+): it
    /// streams through the physical slot `slot` with hot_standby_feedback, so
    /// the primary keeps the catalog rows its logical slots need. Stops this
    /// cluster for a moment.
    pub async fn start_decoding_standby(&mut self, slot: &str) -> Postgres {
        self.standby_through(slot, false).await
    }

    /// A standby streaming through the physical slot `slot`; with
    /// `sync_slots`, set up to synchronise failover slots (PostgreSQL 17+).
    async fn standby_through(&mut self, slot: &str, sync_slots: bool) -> Postgres {
        self.client()
            .await
            .execute(
                "SELECT pg_create_physical_replication_slot($1, true)",
                &[&slot],
            )
            .await
            .unwrap();
        self.stop("fast");
        let dir = TempDir::new("pg-standby");
        let data = dir.0.join("data");
        run(Command::new("cp").arg("-a").arg(self.data_dir()).arg(&data));
        // Like pg_basebackup: the primary's slots are not the standby's.
        for entry in std::fs::read_dir(data.join("pg_replslot")).unwrap() {
            std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
        }
        let mut conf = std::fs::read_to_string(data.join("postgresql.auto.conf")).unwrap();
        conf.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres dbname=postgres \
             application_name={slot}'\nprimary_slot_name = '{slot}'\n\
             hot_standby_feedback = on\n",
            self.port
        ));
        if sync_slots {
            conf.push_str("sync_replication_slots = on\n");
        }
        std::fs::write(data.join("postgresql.auto.conf"), conf).unwrap();
        std::fs::write(data.join("standby.signal"), "").unwrap();
        if is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(&dir.0));
        }

        self.start_server();
        let client = self.client().await;
        if sync_slots {
            // Set after the copy: the promoted standby must not wait for a
            // slot it does not have.
            client
                .set_and_reload("synchronized_standby_slots", slot)
                .await;
        }
        let mut standby = Postgres {
            port: free_port(),
            dir,
            bin: self.bin.clone(),
            running: false,
        };
        standby.start_server();
        eventually(Duration::from_secs(30), "the standby to stream", || async {
            let row = client
                .query_one(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .await
                .unwrap();
            row.get::<_, bool>(0).then_some(())
        })
        .await;
        standby
    }

    /// `pg_ctl promote`: the standby becomes a primary.
    pub fn promote(&self) {
        run(pg_command(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "promote"]));
    }

    /// A crash: SIGKILL to the postmaster and every child of it, with no
    /// shutdown checkpoint and no goodbye to clients.
    pub fn kill9(&mut self) {
        let pid_file = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).unwrap();
        let postmaster: i32 = pid_file.lines().next().unwrap().trim().parse().unwrap();
        let children: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| parent_of(*pid) == Some(postmaster))
            .collect();
        for pid in std::iter::once(postmaster).chain(children) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.running = false;
    }
}

/// The parent pid from /proc/PID/stat ("pid (comm) state ppid …").
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `ALTER SYSTEM SET` and a reload: two statements, as ALTER SYSTEM cannot
/// run in the implicit transaction of a multi-statement query.
pub trait ServerSettings {
    async fn set_and_reload(&self, name: &str, value: &str);
}

impl ServerSettings for tokio_postgres::Client {
    async fn set_and_reload(&self, name: &str, value: &str) {
        self.batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'"))
            .await
            .unwrap();
        self.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    }
}
