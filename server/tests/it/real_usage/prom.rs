//! The real parts of the real-usage tests: an exporter of the test's own
//! serving DCGM- and cAdvisor-shaped series for the fake cluster's pods
//! (`Exporter`), a real Prometheus (Debian's `prometheus`) scraping it
//! every second (`Prom`), and a "Prometheus" that accepts connections and
//! never answers (`Hanging`): the slow one.

use axum::extract::State;
use axum::routing::get;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one pod does, as the exporter reports it.
#[derive(Clone, Debug)]
pub struct PodLoad {
    pub namespace: String,
    /// Each card's utilisation, 0–100 (DCGM_FI_DEV_GPU_UTIL).
    pub cards: Vec<u32>,
    /// Framebuffer in use per card, MiB.
    pub fb_mib: u64,
    /// CPU cores in use (the counter grows at this rate).
    pub cores: f64,
    pub memory_bytes: u64,
}

#[derive(Default)]
struct Series {
    pods: BTreeMap<String, PodLoad>,
    /// Per pod: the CPU counter's value and when it was last advanced.
    cpu: BTreeMap<String, (f64, Option<Instant>)>,
    /// Extra lines served as they are (hostile values, foreign pods).
    extra: Vec<String>,
}

#[derive(Clone, Default)]
pub struct Exporter {
    series: Arc<Mutex<Series>>,
    pub addr: Option<SocketAddr>,
}

impl Exporter {
    pub async fn start() -> Exporter {
        let mut e = Exporter::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        e.addr = Some(listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/metrics", get(metrics))
            .with_state(e.series.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        e
    }

    /// Sets (or replaces) what `pod` does.
    pub fn set(&self, pod: &str, load: PodLoad) {
        self.series
            .lock()
            .unwrap()
            .pods
            .insert(pod.to_string(), load);
    }

    /// Every card of `pod` at `util` percent from now on.
    pub fn set_util(&self, pod: &str, util: u32) {
        let mut s = self.series.lock().unwrap();
        if let Some(p) = s.pods.get_mut(pod) {
            p.cards.iter_mut().for_each(|c| *c = util);
        }
    }

    pub fn add_line(&self, line: &str) {
        self.series.lock().unwrap().extra.push(line.to_string());
    }
}

async fn metrics(State(series): State<Arc<Mutex<Series>>>) -> String {
    let mut s = series.lock().unwrap();
    let now = Instant::now();
    let mut out = String::from(
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n# TYPE DCGM_FI_DEV_FB_USED gauge\n\
         # TYPE container_cpu_usage_seconds_total counter\n\
         # TYPE container_memory_working_set_bytes gauge\n",
    );
    let pods: Vec<(String, PodLoad)> = s.pods.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for (pod, load) in pods {
        let ns = &load.namespace;
        for (i, util) in load.cards.iter().enumerate() {
            let labels = format!(
                r#"gpu="{i}",UUID="GPU-{pod}-{i}",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-1",container="c",namespace="{ns}",pod="{pod}""#
            );
            out.push_str(&format!("DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}\n"));
            out.push_str(&format!(
                "DCGM_FI_DEV_FB_USED{{{labels}}} {}\n",
                load.fb_mib
            ));
        }
        let (value, at) = s.cpu.entry(pod.clone()).or_insert((0.0, None));
        if let Some(at) = at {
            *value += load.cores * now.duration_since(*at).as_secs_f64();
        }
        *at = Some(now);
        let labels = format!(r#"container="c",namespace="{ns}",pod="{pod}""#);
        out.push_str(&format!(
            "container_cpu_usage_seconds_total{{{labels}}} {value}\n"
        ));
        out.push_str(&format!(
            "container_memory_working_set_bytes{{{labels}}} {}\n",
            load.memory_bytes
        ));
    }
    for l in &s.extra {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// A free port on the loopback (bound then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus scraping `exporter` every second.
pub struct Prom {
    child: Option<tokio::process::Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Prom {
    pub async fn start(exporter: SocketAddr) -> Prom {
        bizrq::tls::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: gpus\n    honor_labels: true\n    \
                 static_configs:\n      - targets: ['{exporter}']\n"
            ),
        )
        .unwrap();
        let mut p = Prom {
            child: None,
            port: free_port(),
            dir,
        };
        p.run().await;
        p
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn run(&mut self) {
        let bin = std::env::var("BIZRQ_TEST_PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
        let child = tokio::process::Command::new(&bin)
            .arg(format!(
                "--config.file={}",
                self.dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--log.level=warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "these tests run a real Prometheus ({bin}): {e}. Install Debian's package \
                     (apt-get install -y prometheus; .ci/run does) or set BIZRQ_TEST_PROMETHEUS"
                )
            });
        self.child = Some(child);
        let ready = format!("{}/-/ready", self.url());
        let client = reqwest::Client::new();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if let Ok(r) = client.get(&ready).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("Prometheus on port {} never became ready", self.port);
    }

    /// Waits until `query` (an instant query) answers at least one series.
    pub async fn until_scraped(&self, query: &str) {
        let client = reqwest::Client::new();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let r = client
                .get(format!("{}/api/v1/query", self.url()))
                .query(&[("query", query)])
                .send()
                .await;
            if let Ok(r) = r {
                let v: serde_json::Value = r.json().await.unwrap_or_default();
                if v["data"]["result"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("Prometheus never answered {query}");
    }

    /// Stops the process (its data stays for a restart).
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
            let _ = c.wait().await;
        }
    }

    /// Starts it again on the same port and data.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.run().await;
    }
}

/// A "Prometheus" that accepts every connection and never answers: what a
/// Prometheus overloaded past any timeout looks like to bizrq.
pub struct Hanging {
    pub addr: SocketAddr,
    accepted: Arc<Mutex<Vec<tokio::net::TcpStream>>>,
}

impl Hanging {
    pub async fn start() -> Hanging {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted: Arc<Mutex<Vec<tokio::net::TcpStream>>> = Arc::default();
        let keep = accepted.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                keep.lock().unwrap().push(s);
            }
        });
        Hanging { addr, accepted }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }
}
