//! Logs: text or JSON lines on stderr, through one `tracing` subscriber.

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Installs the global tracing subscriber ([`subscriber`] writing to stderr). `filter` is an
/// `EnvFilter` directive such as `info` or `info,cdtarget=debug`. Text lines are coloured only
/// when stderr is a terminal.
pub fn init_logging(format: LogFormat, filter: &str) -> Result<(), String> {
    use std::io::IsTerminal as _;
    let subscriber = build(format, filter, std::io::stderr, std::io::stderr().is_terminal())?;
    tracing::subscriber::set_global_default(subscriber).map_err(|e| format!("installing the logger: {e}"))
}

/// The subscriber of `cdtarget controller`: lines in `format` written by `writer`, without
/// terminal colour codes. In JSON each line carries the current span (`span`) and every span it
/// runs in (`spans`): a reconcile's kind, namespace, object and revision, and its step.
pub fn subscriber<W>(
    format: LogFormat,
    filter: &str,
    writer: W,
) -> Result<Box<dyn tracing::Subscriber + Send + Sync>, String>
where
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    build(format, filter, writer, false)
}

fn build<W>(
    format: LogFormat,
    filter: &str,
    writer: W,
    ansi: bool,
) -> Result<Box<dyn tracing::Subscriber + Send + Sync>, String>
where
    W: for<'writer> tracing_subscriber::fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("--log-level `{filter}`: {e}"))?;
    // Colour codes only for a person at a terminal: in a file or a container's log they would
    // split `key=value` fields and defeat grep and log collectors.
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    // `CDTARGET_LOG_SPANS=close`: a line as each step of a reconcile ends, with its busy and
    // idle time (how docs/performance.md profiles the push path).
    let spans = match std::env::var("CDTARGET_LOG_SPANS").as_deref() {
        Ok("close") => tracing_subscriber::fmt::format::FmtSpan::CLOSE,
        _ => tracing_subscriber::fmt::format::FmtSpan::NONE,
    };
    let builder = builder.with_span_events(spans);
    Ok(match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => {
            Box::new(builder.json().flatten_event(true).with_current_span(true).with_span_list(true).finish())
        }
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn text_logs_written_elsewhere_than_a_terminal_carry_no_colour_codes() {
        let lines = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = lines.clone();
        let writer = move || Sink(sink.clone());
        let subscriber = subscriber(LogFormat::Text, "info", writer).expect("subscriber");
        let address: SocketAddr = "127.0.0.1:9292".parse().unwrap();
        tracing::subscriber::with_default(subscriber, || tracing::info!(%address, "serving"));
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert!(text.contains("address=127.0.0.1:9292") && !text.contains('\u{1b}'), "{text:?}");
    }

    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
