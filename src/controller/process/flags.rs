//! The flags of `cdtarget controller` and what is read from them before anything connects: the
//! GitLab settings, the receiver's limits and the shard selector.

use std::path::PathBuf;
use std::time::Duration;

use kube::runtime::watcher;

use crate::gitlab;
use crate::source;
use crate::telemetry::LogFormat;
use crate::webhook;

/// Flags of `cdtarget controller`; every flag has an environment-variable equivalent.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// Namespace the controller runs in (the platform namespace): it holds the TenantRepositories
    /// (registrations elsewhere are ignored), the policy ConfigMap and the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "cdtarget-system", value_name = "NAMESPACE")]
    pub namespace: String,
    /// Name of the platform policy ConfigMap in the controller's namespace (key `policy.yaml`).
    /// When it does not exist the documented defaults apply; a change re-renders every CDTarget.
    #[arg(long, env = "CDTARGET_POLICY_CONFIGMAP", default_value = "cdtarget-policy", value_name = "NAME")]
    pub policy_configmap: String,
    /// Directory caching the tenants' repositories (one bare repository and its checked-out
    /// snapshots per registration). Use a volume that survives restarts to keep polls cheap.
    #[arg(long, env = "CDTARGET_CACHE_DIR", default_value = "/var/cache/cdtarget", value_name = "DIR")]
    pub cache_dir: PathBuf,
    /// Most Git fetches running at once.
    #[arg(long, env = "CDTARGET_FETCH_CONCURRENCY", default_value_t = 4, value_name = "N")]
    pub fetch_concurrency: usize,
    /// Most revisions loaded (read, built and checked) at once; each may hold up to
    /// `--revision-max-object-bytes` while it loads.
    #[arg(long, env = "CDTARGET_LOAD_CONCURRENCY", default_value_t = crate::controller::tenant_repository::load::DEFAULT_LOAD_CONCURRENCY, value_name = "N")]
    pub load_concurrency: usize,
    /// Most memory the objects of one revision may take while it loads (estimated: after YAML
    /// aliases, patches, prefixes, labels and annotations); more refuses the revision.
    #[arg(long, env = "CDTARGET_REVISION_MAX_OBJECT_BYTES", default_value_t = crate::budget::Limits::default().bytes, value_name = "BYTES")]
    pub revision_max_object_bytes: u64,
    /// Most objects one revision may produce (a base reached twice counts twice).
    #[arg(long, env = "CDTARGET_REVISION_MAX_OBJECTS", default_value_t = crate::budget::Limits::default().objects, value_name = "N")]
    pub revision_max_objects: usize,
    /// Longest one revision's load may take, as a duration (`60s`, `2m`); it is then abandoned
    /// and the revision refused.
    #[arg(long, env = "CDTARGET_REVISION_LOAD_TIMEOUT", default_value = "60s", value_name = "DURATION",
          value_parser = source::registration::parse_timeout)]
    pub revision_load_timeout: Duration,
    /// Most reconciles running at once, per kind (0: unbounded).
    #[arg(long, env = "CDTARGET_RECONCILE_CONCURRENCY", default_value_t = 8, value_name = "N")]
    pub reconcile_concurrency: u16,
    /// How often a CDTarget whose children are in place is checked again, as a duration (`10m`,
    /// `90s`, `1h30m`): drift of a child the watches missed, RBAC changes and new registrations
    /// (neither is watched) are picked up at this pace. Each check reads the children and asks
    /// one SubjectAccessReview per referenced Secret or ConfigMap and tenant identity.
    #[arg(long, env = "CDTARGET_RESYNC_INTERVAL", default_value = "10m", value_name = "DURATION",
          value_parser = parse_interval)]
    pub cdtarget_resync_interval: Duration,
    /// Upper bound on one Git fetch, as a duration (`60s`, `2m`; a bare number counts as
    /// seconds); a socket silent for this long is cut too.
    #[arg(long, env = "CDTARGET_GIT_TIMEOUT", default_value = "60s", value_name = "DURATION",
          value_parser = source::registration::parse_timeout)]
    pub git_timeout: Duration,
    /// Most bytes one Git fetch may receive (the pack); more stalls the registration with
    /// `TooLarge`.
    #[arg(long, env = "CDTARGET_GIT_MAX_FETCH_BYTES", default_value_t = source::Limits::default().max_fetch_bytes, value_name = "BYTES")]
    pub git_max_fetch_bytes: u64,
    /// Most bytes of a checked-out tree (all files); more stalls the registration with
    /// `SnapshotTooLarge`.
    #[arg(long, env = "CDTARGET_GIT_MAX_SNAPSHOT_BYTES", default_value_t = source::Limits::default().max_tree_bytes, value_name = "BYTES")]
    pub git_max_snapshot_bytes: u64,
    /// Disk budget of one registration's cache (repository, running snapshot and the one being
    /// written); more stalls it with `CacheTooLarge`. Keep it at least fetch + 2 × snapshot.
    #[arg(long, env = "CDTARGET_GIT_MAX_CACHE_BYTES", default_value_t = source::Limits::default().max_cache_bytes, value_name = "BYTES")]
    pub git_max_cache_bytes: u64,
    /// Label selector for sharding: only TenantRepositories and CDTargets matching it are
    /// reconciled by this replica (e.g. `example.com/shard=a`: tenant documents may not carry
    /// `cdtarget.io/` labels). Give each shard its own `--lease-name`.
    #[arg(long, env = "CDTARGET_SHARD_SELECTOR", value_name = "SELECTOR")]
    pub shard_selector: Option<String>,
    /// Elect a leader on a coordination.k8s.io Lease so that only one replica reconciles;
    /// `--leader-elect=false` for a single replica or local runs.
    #[arg(long, env = "CDTARGET_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease in the controller's namespace.
    #[arg(long, env = "CDTARGET_LEASE_NAME", default_value = "cdtarget-controller", value_name = "NAME")]
    pub lease_name: String,
    /// This replica's identity in the Lease (the pod name; the host name when unset).
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,
    /// Listen address of `/metrics`, `/healthz` and `/readyz` (`:8080` is every interface).
    #[arg(long, env = "CDTARGET_METRICS_ADDRESS", default_value = ":8080", value_name = "ADDRESS")]
    pub metrics_address: String,
    /// Listen address of the webhook receiver (`POST /hook/<digest>`; `:9292` is every
    /// interface).
    #[arg(long, env = "CDTARGET_WEBHOOK_ADDR", default_value = ":9292", value_name = "ADDRESS")]
    pub webhook_addr: String,
    /// Webhook body reads per second from everyone together (twice as many in a burst): requests
    /// that found their registration and passed the header checks; more are answered 429. 0
    /// disables the limit.
    #[arg(long, env = "CDTARGET_WEBHOOK_GLOBAL_RATE", default_value_t = 100, value_name = "PER_SECOND")]
    pub webhook_global_rate: u32,
    /// Verified webhook deliveries per minute accepted for one registration (20 in a burst);
    /// more are answered 429. 0 disables the limit.
    #[arg(long, env = "CDTARGET_WEBHOOK_REGISTRATION_RATE", default_value_t = 60, value_name = "PER_MINUTE")]
    pub webhook_registration_rate: u32,
    /// Webhook body reads per second for one registration, verified or not (ten times as many in
    /// a burst); taken before the global limit. 0 disables the limit.
    #[arg(long, env = "CDTARGET_WEBHOOK_REGISTRATION_READ_RATE", default_value_t = 5, value_name = "PER_SECOND")]
    pub webhook_registration_read_rate: u32,
    /// MiB that webhook bodies being read may hold at once (a quarter of it per registration,
    /// at least one body of 3 MiB); more are answered 503 unread.
    #[arg(long, env = "CDTARGET_WEBHOOK_IN_FLIGHT_MIB", default_value_t = 32, value_name = "MIB",
          value_parser = clap::value_parser!(u32).range(3..))]
    pub webhook_in_flight_mib: u32,
    /// ServiceAccount (in each tenant namespace) whose read rights bound the Secrets and
    /// ConfigMaps a CDTarget may hand its agents in a namespace no TenantRepository applies into.
    /// Unset: there, only ServiceAccount-token Secrets are refused.
    #[arg(long, env = "CDTARGET_DEFAULT_TENANT_SERVICE_ACCOUNT", value_name = "NAME")]
    pub default_tenant_service_account: Option<String>,
    /// Log format.
    #[arg(long, env = "CDTARGET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,
    /// Log level or filter (`info`, `debug`, `info,kube=warn`, ...).
    #[arg(long, env = "CDTARGET_LOG_LEVEL", default_value = "info", value_name = "FILTER")]
    pub log_level: String,
    /// GitLab base URL (e.g. `https://gitlab.example.com`): registrations with `spec.gitlab` get
    /// their deploy key and webhook managed. Needs the three flags below.
    #[arg(long, env = "CDTARGET_GITLAB_URL", value_name = "URL")]
    pub gitlab_url: Option<String>,
    /// File holding the GitLab bot token (scope `api`, Maintainer), e.g. a mounted Secret.
    #[arg(long, env = "CDTARGET_GITLAB_TOKEN_FILE", value_name = "FILE")]
    pub gitlab_token_file: Option<PathBuf>,
    /// File holding the `known_hosts` lines of the GitLab SSH server, written into generated
    /// key pair Secrets (no trust on first use).
    #[arg(long, env = "CDTARGET_GITLAB_KNOWN_HOSTS_FILE", value_name = "FILE")]
    pub gitlab_known_hosts_file: Option<PathBuf>,
    /// The receiver's URL as GitLab reaches it (e.g. `https://cd.example.com`); webhooks point
    /// at this URL + `/hook/<digest>`.
    #[arg(long, env = "CDTARGET_WEBHOOK_EXTERNAL_URL", value_name = "URL")]
    pub webhook_external_url: Option<String>,
    /// Post a commit status (`pending`, then `success` or `failed`) on every revision evaluated
    /// for a registration with `spec.gitlab`, and one comment on a refused revision.
    #[arg(long, env = "CDTARGET_GITLAB_COMMIT_STATUS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub gitlab_commit_status: bool,
    /// The commit status name; placeholders `{namespace}`, `{name}` (the registration),
    /// `{targetNamespace}`, `{revision}`, `{shortRevision}`.
    #[arg(long, env = "CDTARGET_GITLAB_STATUS_NAME", default_value = gitlab::commit_status::DEFAULT_STATUS_NAME, value_name = "NAME")]
    pub gitlab_status_name: String,
    /// The commit status link, e.g. `https://dash.example.com/{targetNamespace}?rev={revision}`
    /// (same placeholders, values URL-encoded); http(s), at most 255 characters once expanded.
    #[arg(long, env = "CDTARGET_GITLAB_STATUS_TARGET_URL", value_name = "URL")]
    pub gitlab_status_target_url: Option<String>,
}

/// A positive Go-style duration (`10m`, `90s`, `1h30m`), as `spec.interval` is written.
fn parse_interval(text: &str) -> Result<Duration, String> {
    source::registration::parse_go_duration(text)
        .filter(|interval| !interval.is_zero())
        .ok_or_else(|| format!("`{text}` is not a positive duration such as `90s`, `10m` or `1h30m`"))
}

/// The GitLab settings from the flags: `None` without `--gitlab-url`; every companion flag is
/// then required, and the files must be readable (the token never appears in an error).
pub fn gitlab_settings(args: &Args) -> Result<Option<gitlab::Settings>, String> {
    let Some(url) = args.gitlab_url.as_deref().filter(|u| !u.trim().is_empty()) else {
        let given = [
            ("--gitlab-token-file", args.gitlab_token_file.is_some()),
            ("--gitlab-known-hosts-file", args.gitlab_known_hosts_file.is_some()),
            ("--webhook-external-url", args.webhook_external_url.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
            return Err(format!("{flag} is set but --gitlab-url is not"));
        }
        return Ok(None);
    };
    let missing = |flag: &str| format!("--gitlab-url is set: {flag} is required too");
    let token_file = args.gitlab_token_file.as_deref().ok_or_else(|| missing("--gitlab-token-file"))?;
    let known_hosts_file =
        args.gitlab_known_hosts_file.as_deref().ok_or_else(|| missing("--gitlab-known-hosts-file"))?;
    let external = args.webhook_external_url.as_deref().ok_or_else(|| missing("--webhook-external-url"))?;
    gitlab::receiver_url(external, "/").map_err(|e| e.to_string())?;
    let token =
        gitlab::Secret::from_file(token_file, "the GitLab token").map_err(|e| format!("--gitlab-token-file: {e}"))?;
    let known_hosts = std::fs::read_to_string(known_hosts_file)
        .map_err(|e| format!("--gitlab-known-hosts-file {}: {e}", known_hosts_file.display()))?;
    if known_hosts.trim().is_empty() {
        return Err(format!(
            "--gitlab-known-hosts-file {} is empty; put the GitLab SSH host keys in it (ssh-keyscan)",
            known_hosts_file.display()
        ));
    }
    let client =
        gitlab::GitLabClient::new(gitlab::ClientConfig::new(url, token)).map_err(|e| format!("--gitlab-url: {e}"))?;
    let commit_status = match args.gitlab_commit_status {
        true => Some(gitlab::StatusSettings::new(&args.gitlab_status_name, args.gitlab_status_target_url.as_deref())?),
        false => None,
    };
    Ok(Some(gitlab::Settings { client, webhook_external_url: external.trim().to_owned(), known_hosts, commit_status }))
}

/// The receiver's limits from the flags (the rest are the defaults).
pub(crate) fn webhook_limits(args: &Args) -> webhook::Limits {
    let global = args.webhook_global_rate;
    let registration = args.webhook_registration_rate;
    let reads = args.webhook_registration_read_rate;
    let defaults = webhook::Limits::default();
    let in_flight = args.webhook_in_flight_mib as usize * 1024 * 1024;
    webhook::Limits {
        global_rate: (global > 0).then(|| webhook::Rate::new(f64::from(global), global.saturating_mul(2))),
        registration_rate: (registration > 0).then(|| webhook::Rate::new(f64::from(registration) / 60.0, 20)),
        registration_read_rate: (reads > 0).then(|| webhook::Rate::new(f64::from(reads), reads.saturating_mul(10))),
        in_flight_bytes: in_flight,
        registration_in_flight_bytes: (in_flight / 4).max(defaults.max_body_bytes),
        ..defaults
    }
}

/// The watcher configuration of the sharded kinds.
pub(crate) fn shard_config(selector: Option<&str>) -> watcher::Config {
    let config = watcher::Config::default().any_semantic();
    match selector.filter(|s| !s.trim().is_empty()) {
        Some(selector) => config.labels(selector),
        None => config,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_rate_flags_become_buckets_and_zero_disables_them() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| Cli::parse_from([&["cdtarget"], extra].concat()).args;
        let defaults = parse(&[]);
        assert_eq!(defaults.webhook_addr, ":9292");
        let limits = webhook_limits(&defaults);
        assert_eq!(limits.global_rate, Some(webhook::Rate::new(100.0, 200)));
        assert_eq!(limits.registration_rate, Some(webhook::Rate::new(1.0, 20)));
        let off = webhook_limits(&parse(&["--webhook-global-rate", "0", "--webhook-registration-rate", "0"]));
        assert_eq!((off.global_rate, off.registration_rate), (None, None));
    }

    #[test]
    fn gitlab_flags_come_together_and_never_show_the_token() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| Cli::parse_from([&["cdtarget"], extra].concat()).args;
        assert!(gitlab_settings(&parse(&[])).unwrap().is_none());
        let error = gitlab_settings(&parse(&["--webhook-external-url", "https://cd.example.com"])).unwrap_err();
        assert!(error.contains("--gitlab-url is not"), "{error}");
        let error = gitlab_settings(&parse(&["--gitlab-url", "https://gitlab.example.com"])).unwrap_err();
        assert!(error.contains("--gitlab-token-file is required"), "{error}");

        let dir = std::env::temp_dir().join(format!("cdtarget-gitlab-flags-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (token, hosts) = (dir.join("token"), dir.join("known_hosts"));
        std::fs::write(&token, "glpat-secret-value\n").unwrap();
        std::fs::write(&hosts, "").unwrap();
        let full = |url: &str| {
            parse(&[
                "--gitlab-url",
                "https://gitlab.example.com",
                "--gitlab-token-file",
                token.to_str().unwrap(),
                "--gitlab-known-hosts-file",
                hosts.to_str().unwrap(),
                "--webhook-external-url",
                url,
            ])
        };
        let error = gitlab_settings(&full("https://cd.example.com")).unwrap_err();
        assert!(error.contains("is empty") && !error.contains("glpat"), "{error}");
        std::fs::write(&hosts, "gitlab.example.com ssh-ed25519 AAAA\n").unwrap();
        let error = gitlab_settings(&full("ftp://cd.example.com")).unwrap_err();
        assert!(error.contains("--webhook-external-url"), "{error}");
        let settings = gitlab_settings(&full("https://cd.example.com/")).unwrap().unwrap();
        assert_eq!(settings.webhook_external_url, "https://cd.example.com/");
        assert!(settings.known_hosts.starts_with("gitlab.example.com"));
        let statuses = settings.commit_status.expect("commit statuses are on by default");
        assert_eq!((statuses.name.as_str(), statuses.target_url), (gitlab::commit_status::DEFAULT_STATUS_NAME, None));
        let with = |extra: &[&str]| {
            let mut args = full("https://cd.example.com");
            let parsed = parse(extra);
            (args.gitlab_commit_status, args.gitlab_status_name, args.gitlab_status_target_url) =
                (parsed.gitlab_commit_status, parsed.gitlab_status_name, parsed.gitlab_status_target_url);
            gitlab_settings(&args)
        };
        assert!(with(&["--gitlab-commit-status=false"]).unwrap().unwrap().commit_status.is_none());
        let error = with(&["--gitlab-status-target-url", "ftp://x/{revision}"]).unwrap_err();
        assert!(error.contains("--gitlab-status-target-url"), "{error}");
        let error = with(&["--gitlab-status-name", "cd/{branch}"]).unwrap_err();
        assert!(error.contains("unknown placeholder"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cdtarget_resync_interval_is_a_positive_duration_ten_minutes_by_default() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| Cli::try_parse_from([&["cdtarget"], extra].concat()).map(|cli| cli.args);
        assert_eq!(parse(&[]).unwrap().cdtarget_resync_interval, Duration::from_secs(600));
        let given = parse(&["--cdtarget-resync-interval", "1m30s"]).unwrap();
        assert_eq!(given.cdtarget_resync_interval, Duration::from_secs(90));
        for refused in ["0s", "10", "soon"] {
            let error = parse(&["--cdtarget-resync-interval", refused]).expect_err(refused).to_string();
            assert!(error.contains("not a positive duration"), "{error}");
        }
    }

    #[test]
    fn an_empty_shard_selector_selects_everything() {
        assert_eq!(shard_config(Some("  ")).label_selector, None);
        assert_eq!(shard_config(Some("shard=a")).label_selector.as_deref(), Some("shard=a"));
        assert_eq!(shard_config(None).label_selector, None);
    }
}
