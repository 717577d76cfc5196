//! A throwaway MIT Kerberos realm, WALRELAY.TEST: a KDC (Debian's
//! krb5-kdc) on a free port, with its database, configuration, log and
//! keytabs in a temporary directory. Its tools and its clients read only
//! the files made here (KRB5_CONFIG, KRB5_KDC_PROFILE, KRB5CCNAME): the
//! system's /etc/krb5.conf and ticket caches are never read or written.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, TempDir};

pub const REALM: &str = "WALRELAY.TEST";

pub struct Kdc {
    pub port: u16,
    dir: TempDir,
    child: Option<Child>,
}

/// An MIT Kerberos program: the KDC and its admin tools live in /usr/sbin,
/// which a test's PATH may lack.
fn program(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() {
        return sbin;
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.exists());
    on_path.unwrap_or_else(|| {
        panic!("{name} is not installed: run scripts/install-deps.sh (krb5-kdc, krb5-admin-server)")
    })
}

impl Kdc {
    /// A new realm with an empty database, its KDC serving on 127.0.0.1.
    pub fn start() -> Self {
        let dir = TempDir::new("kdc");
        let port = free_port();
        let kdc = Kdc {
            port,
            dir,
            child: None,
        };
        kdc.write_config();
        // -s: a stash file, so that the KDC starts without asking for the
        // master password.
        kdc.admin(
            "kdb5_util",
            &["create", "-s", "-r", REALM, "-P", "walrelay-test-master"],
        );
        kdc.spawn()
    }

    /// One test binary's realm, started by its first test and stopped when
    /// the binary exits.
    pub fn shared() -> &'static Kdc {
        static SHARED: std::sync::OnceLock<Kdc> = std::sync::OnceLock::new();
        extern "C" fn stop_shared() {
            if let Some(kdc) = SHARED.get() {
                kdc.stop_from_exit();
            }
        }
        SHARED.get_or_init(|| {
            let kdc = Kdc::start();
            // A static is never dropped: stop the KDC when the process exits.
            unsafe { libc::atexit(stop_shared) };
            kdc
        })
    }

    fn write_config(&self) {
        let dir = self.dir.0.display();
        let port = self.port;
        std::fs::write(self.krb5_conf(), krb5_conf(port)).unwrap();
        std::fs::write(
            self.dir.0.join("kdc.conf"),
            format!(
                "[kdcdefaults]\n kdc_listen = 127.0.0.1:{port}\n kdc_tcp_listen = \
                 127.0.0.1:{port}\n\n[realms]\n {REALM} = {{\n  database_name = {dir}/principal\n  \
                 key_stash_file = {dir}/stash\n  acl_file = {dir}/kadm5.acl\n }}\n\n[logging]\n \
                 kdc = FILE:{dir}/kdc.log\n"
            ),
        )
        .unwrap();
    }

    /// An admin tool of this realm, run to its end.
    fn admin(&self, name: &str, args: &[&str]) -> String {
        let out = self
            .command(name)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{name} {args:?} failed:\n{text}");
        text
    }

    fn command(&self, name: &str) -> Command {
        let mut command = Command::new(program(name));
        command
            .env("KRB5_CONFIG", self.krb5_conf())
            .env("KRB5_KDC_PROFILE", self.dir.0.join("kdc.conf"))
            .env(
                "KRB5CCNAME",
                format!("FILE:{}/admin.ccache", self.dir.0.display()),
            );
        command
    }

    /// krb5kdc in the foreground (-n), ready once its port takes a connection.
    fn spawn(mut self) -> Self {
        let out = std::fs::File::create(self.dir.0.join("krb5kdc.out")).unwrap();
        let child = self
            .command("krb5kdc")
            .arg("-n")
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start krb5kdc: {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("krb5kdc exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "krb5kdc did not listen:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self
    }

    /// Adds `principal` (NAME or SERVICE/HOST, in this realm) with a random
    /// key, and writes that key to a keytab of its own: its path.
    pub fn add_principal(&self, principal: &str) -> PathBuf {
        let keytab = self
            .dir
            .0
            .join(format!("{}.keytab", principal.replace('/', "_")));
        self.admin(
            "kadmin.local",
            &["-q", &format!("addprinc -randkey {principal}")],
        );
        self.admin(
            "kadmin.local",
            &["-q", &format!("ktadd -k {} {principal}", keytab.display())],
        );
        keytab
    }

    /// The krb5.conf that names this realm and its KDC.
    pub fn krb5_conf(&self) -> PathBuf {
        self.dir.0.join("krb5.conf")
    }

    /// The environment of a client of this realm: its krb5.conf, and a
    /// ticket cache of its own named `cache`.
    pub fn client_env(&self, cache: &str) -> Vec<(String, String)> {
        vec![
            ("KRB5_CONFIG".into(), self.krb5_conf().display().to_string()),
            (
                "KRB5CCNAME".into(),
                format!("FILE:{}", self.cache(cache).display()),
            ),
        ]
    }

    /// `client_env(cache)` with a krb5.conf whose KDC for this realm is on a
    /// port where nobody answers.
    pub fn client_env_without_kdc(&self, cache: &str) -> Vec<(String, String)> {
        let conf = self.dir.0.join(format!("{cache}-krb5.conf"));
        std::fs::write(&conf, krb5_conf(free_port())).unwrap();
        let mut env = self.client_env(cache);
        env[0].1 = conf.display().to_string();
        env
    }

    /// The ticket cache `client_env(cache)` names.
    pub fn cache(&self, cache: &str) -> PathBuf {
        self.dir.0.join(format!("{cache}.ccache"))
    }

    /// The KDC's log: each ticket it issued (AS_REQ for a login, TGS_REQ
    /// for a service), to whom, and each it refused.
    pub fn log(&self) -> String {
        let mut log = std::fs::read_to_string(self.dir.0.join("kdc.log")).unwrap_or_default();
        log.push_str(&std::fs::read_to_string(self.dir.0.join("krb5kdc.out")).unwrap_or_default());
        log
    }

    fn stop_from_exit(&self) {
        super::stop_from_exit(self.child.as_ref(), &self.dir);
    }
}

/// A krb5.conf for this realm, its KDC on 127.0.0.1:`port`: TCP first
/// (udp_preference_limit = 1) for every client, the JVM's included; no DNS,
/// and host names as written, so the broker's principal is the name the
/// client connects to.
fn krb5_conf(port: u16) -> String {
    format!(
        "[libdefaults]\n default_realm = {REALM}\n dns_lookup_realm = false\n \
         dns_lookup_kdc = false\n rdns = false\n dns_canonicalize_hostname = false\n \
         udp_preference_limit = 1\n\n[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\n\
         [domain_realm]\n localhost = {REALM}\n"
    )
}

impl Drop for Kdc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
