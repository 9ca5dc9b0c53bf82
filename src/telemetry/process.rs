//! The standard `process_*` metrics of a Prometheus client (CPU time, memory, file descriptors,
//! threads, start time), read from `/proc/self` at every scrape, so they cost nothing between
//! scrapes and are never stale.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self` says about this process at one moment.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ProcessSample {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_memory_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_memory_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`None`: unlimited).
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// OS threads.
    pub threads: u64,
}

impl ProcessSample {
    /// Reads `/proc/self` (stat, limits and the fd directory).
    #[cfg(target_os = "linux")]
    pub fn read() -> Result<ProcessSample, String> {
        use procfs::process::{LimitValue, Process};
        let me = Process::myself().map_err(|e| format!("/proc/self: {e}"))?;
        let stat = me.stat().map_err(|e| format!("/proc/self/stat: {e}"))?;
        let ticks = procfs::ticks_per_second() as f64;
        let boot = procfs::boot_time_secs().map_err(|e| format!("/proc/stat btime: {e}"))?;
        let max_fds = match me.limits().map_err(|e| format!("/proc/self/limits: {e}"))?.max_open_files.soft_limit {
            LimitValue::Value(limit) => Some(limit),
            LimitValue::Unlimited => None,
        };
        Ok(ProcessSample {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            resident_memory_bytes: stat.rss * procfs::page_size(),
            virtual_memory_bytes: stat.vsize,
            open_fds: me.fd_count().map_err(|e| format!("/proc/self/fd: {e}"))? as u64,
            max_fds,
            start_time_seconds: boot as f64 + stat.starttime as f64 / ticks,
            threads: u64::try_from(stat.num_threads).unwrap_or(0),
        })
    }

    /// Not on Linux: nothing to read.
    #[cfg(not(target_os = "linux"))]
    pub fn read() -> Result<ProcessSample, String> {
        Err("process metrics are read from /proc, which only Linux has".into())
    }
}

/// Encodes a [`ProcessSample`] read at each scrape. Register it on a registry without a prefix:
/// the names are the standard ones every Prometheus client exposes.
#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = match ProcessSample::read() {
            Ok(sample) => sample,
            Err(error) => {
                // A scrape still answers the controller's own metrics.
                tracing::debug!(%error, "process metrics unavailable");
                return Ok(());
            }
        };
        let cpu = ConstCounter::new(sample.cpu_seconds);
        // A counter's samples get the `_total` suffix: `process_cpu_seconds_total`.
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            sample.resident_memory_bytes as f64,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            sample.virtual_memory_bytes as f64,
        )?;
        gauge(&mut encoder, "process_open_fds", "Number of open file descriptors", sample.open_fds as f64)?;
        // Unlimited is +Inf, as the Go client reports it, so that `open / max` stays meaningful.
        let max = sample.max_fds.map_or(f64::INFINITY, |max| max as f64);
        gauge(&mut encoder, "process_max_fds", "Maximum number of open file descriptors", max)?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            sample.start_time_seconds,
        )?;
        gauge(&mut encoder, "process_threads", "Number of OS threads in the process", sample.threads as f64)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_sample_of_this_process_is_plausible_and_follows_what_it_does() {
        let before = ProcessSample::read().expect("sample");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(before.start_time_seconds > 1.0e9 && before.start_time_seconds <= now + 1.0, "{before:?}");
        assert!(before.resident_memory_bytes > 0 && before.virtual_memory_bytes >= before.resident_memory_bytes);
        assert!(before.threads >= 1 && before.open_fds >= 1, "{before:?}");
        assert!(before.max_fds.is_none_or(|max| max >= before.open_fds), "{before:?}");

        // Hold 20 files open and work until the kernel has charged CPU time (it counts in ticks).
        let files: Vec<_> = (0..20).map(|_| std::fs::File::open("/proc/self/stat").expect("open")).collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut x = 0u64;
        let during = loop {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            let sample = ProcessSample::read().expect("sample");
            if sample.cpu_seconds > before.cpu_seconds || std::time::Instant::now() > deadline {
                break sample;
            }
        };
        // Other tests of this binary open and close files too: the 20 held here are a floor.
        assert!(during.open_fds >= 20, "{during:?}");
        assert!(during.cpu_seconds > before.cpu_seconds, "{before:?} then {during:?}");
        assert_eq!(during.start_time_seconds, before.start_time_seconds);
        println!("process sample while holding 20 files: {during:?}");
        drop(files);
    }

    #[test]
    fn the_collector_writes_the_standard_names() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "process_threads ",
        ] {
            assert!(text.lines().any(|line| line.starts_with(name)), "no sample of {name}in {text}");
        }
        assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
    }
}
