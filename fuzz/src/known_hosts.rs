//! `known_hosts_parse`: arbitrary bytes → a registration's `known_hosts` text, and the host key
//! check of a server against it.
//!
//! Input: the first line is the query (`host key-base64`), the rest the known_hosts text.
//! Invariants: no panic, and no time that grows faster than the input (host patterns are
//! matched without exponential backtracking); parsing is deterministic; a key is trusted only
//! when the text lists exactly that key; fingerprints have `ssh-keygen -l`'s form.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use cdtarget::source::known_hosts::{HostKeyVerdict, KnownHosts, fingerprint};

/// The longest host name DNS allows; the controller asks about a host from a parsed URL.
const MAX_HOST: usize = 255;

/// The fuzz target.
pub fn check(data: &[u8]) {
    let text = super::text(data);
    let (query, known) = text.split_once('\n').unwrap_or((&text, ""));
    let (host, key) = query.split_once(' ').unwrap_or((query, ""));
    let host: String = host.chars().take(MAX_HOST).collect();
    // A key the text may list (base64), or else the raw bytes of the query.
    let key = STANDARD.decode(key.trim()).unwrap_or_else(|_| key.as_bytes().to_vec());

    let parsed = KnownHosts::parse(known);
    assert_eq!(parsed, KnownHosts::parse(known), "parsing is not deterministic");

    let shown = fingerprint(&key);
    assert!(shown.starts_with("SHA256:") && shown.len() == 7 + 43, "fingerprint `{shown}`");
    for port in [22, 2222] {
        match parsed.verify(&host, port, &key) {
            HostKeyVerdict::Trusted => {
                let encoded = STANDARD.encode(&key);
                let listed = known.lines().any(|line| line.split_whitespace().any(|field| field == encoded));
                assert!(listed, "key {shown} trusted for {host}:{port}, but the text does not list it");
            }
            HostKeyVerdict::Mismatch { presented } | HostKeyVerdict::Unknown { presented } => {
                assert_eq!(presented, shown, "verdict with another key's fingerprint");
            }
        }
    }
    if parsed.is_empty() {
        assert!(matches!(parsed.verify(&host, 22, &key), HostKeyVerdict::Unknown { .. }), "trust on first use");
    }
}
