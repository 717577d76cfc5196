//! A Kafka broker on a free port, tansu or Apache Kafka behind one type, and
//! a consumer that reads topics with assign(), as tansu's consumer groups
//! are slow.
//!
//! `Broker::start()` runs the broker `WALRELAY_TEST_BROKER` names (`tansu`,
//! the default, or `apache`), so a whole test binary can run on either;
//! `Broker::start_kind` picks one for a single test.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{free_port, signal, TempDir};

/// Which broker a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerKind {
    /// tansu, a Kafka-protocol broker: in memory, or on SQLite when durable.
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
    Tansu { storage: String },
    Apache { controller_port: u16 },
}

pub struct Broker {
    pub port: u16,
    engine: Engine,
    child: Option<Child>,
    dir: TempDir,
}

pub fn tansu_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("WALRELAY_TANSU") {
        return path.into();
    }
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"));
    let candidate = home.join("bin/tansu");
    if candidate.exists() {
        return candidate;
    }
    panic!("tansu is not installed: run scripts/test.sh, which installs it");
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

    /// A broker whose data survives kill -9 (tansu on SQLite; Apache Kafka
    /// always is), of the kind `WALRELAY_TEST_BROKER` names.
    pub fn start_durable() -> Self {
        Self::start_durable_kind(BrokerKind::from_env())
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

    /// A broker of `kind` whose data survives kill -9.
    pub fn start_durable_kind(kind: BrokerKind) -> Self {
        match kind {
            // tansu reads the path relative to its working directory, which is `dir`.
            BrokerKind::Tansu => Self::start_tansu("sqlite://tansu.db"),
            BrokerKind::Apache => Self::start_apache(),
        }
    }

    fn start_tansu(storage: &str) -> Self {
        let storage = storage.to_string();
        Self::launch("tansu", free_port(), Engine::Tansu { storage })
    }

    fn start_apache() -> Self {
        let port = free_port();
        let controller_port = std::iter::repeat_with(free_port)
            .find(|&p| p != port)
            .unwrap();
        Self::launch("kafka", port, Engine::Apache { controller_port })
    }

    fn launch(tag: &str, port: u16, engine: Engine) -> Self {
        let mut broker = Broker {
            port,
            engine,
            child: None,
            dir: TempDir::new(tag),
        };
        broker.spawn();
        broker
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
            Engine::Apache { controller_port } => {
                // `run` execs the JVM, so the child's pid is the broker's.
                let mut command = Command::new(kafka_script());
                command
                    .arg("run")
                    .arg(&self.dir.0)
                    .arg(self.port.to_string())
                    .arg(controller_port.to_string());
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
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker is running").id()
    }

    /// SIGSTOP: the broker keeps its sockets but answers nothing.
    pub fn pause(&self) {
        signal(self.pid(), libc::SIGSTOP);
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
        create_topic_at(&self.brokers(), topic, partitions, config).await;
    }

    /// A topic-level configuration value, through DescribeConfigs.
    pub async fn topic_config(&self, topic: &str, key: &str) -> Option<String> {
        use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .unwrap();
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
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .unwrap();
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
        KafkaReader::new(&self.brokers())
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
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
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
        let consumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
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
