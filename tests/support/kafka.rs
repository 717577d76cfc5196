//! A tansu broker (a Kafka-protocol broker) on a free port, and a consumer
//! that reads topics with assign(), as tansu's consumer groups are slow.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{free_port, signal, TempDir};

pub struct Broker {
    pub port: u16,
    child: Option<Child>,
    dir: TempDir,
    storage: String,
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

impl Broker {
    /// A broker with in-memory storage.
    pub fn start() -> Self {
        Self::start_on("memory://tansu/")
    }

    /// A broker whose data survives kill -9 (SQLite storage).
    pub fn start_durable() -> Self {
        let dir = TempDir::new("tansu");
        // tansu reads the path relative to its working directory, which is `dir`.
        Self::start_in(dir, "sqlite://tansu.db".to_string())
    }

    fn start_on(storage: &str) -> Self {
        Self::start_in(TempDir::new("tansu"), storage.to_string())
    }

    fn start_in(dir: TempDir, storage: String) -> Self {
        let mut broker = Broker {
            port: free_port(),
            child: None,
            dir,
            storage,
        };
        broker.spawn();
        broker
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.0.join("tansu.log"))
            .unwrap();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(tansu_bin())
            .current_dir(&self.dir.0)
            .arg("broker")
            .args(["--kafka-listener-url", &url])
            .args(["--kafka-advertised-listener-url", &url])
            .args(["--storage-engine", &self.storage])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("cannot start tansu");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen: {}",
                self.log()
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

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

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
        std::fs::read_to_string(self.dir.0.join("tansu.log")).unwrap_or_default()
    }

    /// Creates a topic through tansu's own admin command.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
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
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<_> = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
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
                let m = result.expect("consumer error");
                let mut headers = HashMap::new();
                if let Some(h) = m.headers() {
                    for header in h.iter() {
                        headers.insert(
                            header.key.to_string(),
                            header
                                .value
                                .map(|v| String::from_utf8_lossy(v).into_owned()),
                        );
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
