//! `known_hosts` entries supplied with a registration, and the check of a server's host key
//! against them. There is no trust on first use: a host without an entry is refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// One usable line of a known_hosts file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    hosts: HostPattern,
    key_type: String,
    key: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// Comma-separated names, `[host]:port` for non-standard ports; `*`/`?` wildcards; `!` negation.
    Plain(Vec<String>),
    /// `|1|salt|hash`: HMAC-SHA1 of the host name under the salt.
    Hashed { salt: Vec<u8>, hash: Vec<u8> },
}

/// The entries of a known_hosts text. Comments, `@revoked`/`@cert-authority` markers and lines
/// that cannot be read are ignored (they can only ever fail to match).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

/// The outcome of a host key check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostKeyVerdict {
    /// An entry for the host holds this key.
    Trusted,
    /// Entries exist for the host, none with this key: the key changed, or someone is in between.
    Mismatch {
        /// SHA-256 fingerprint of the key presented, `SHA256:<base64>` as `ssh-keygen -l` prints.
        presented: String,
    },
    /// No entry names the host.
    Unknown {
        /// SHA-256 fingerprint of the key presented.
        presented: String,
    },
}

impl KnownHosts {
    /// Reads known_hosts text.
    pub fn parse(text: &str) -> Self {
        let entries = text.lines().filter_map(parse_line).collect();
        KnownHosts { entries }
    }

    /// Whether no usable entry was found.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks the raw host key blob (`key` as in the second field of a `.pub` line, decoded)
    /// that `host` (`127.0.0.1`) on `port` presented.
    pub fn verify(&self, host: &str, port: u16, key: &[u8]) -> HostKeyVerdict {
        let name = if port == 22 { host.to_owned() } else { format!("[{host}]:{port}") };
        let mut named = false;
        for entry in self.entries.iter().filter(|e| e.hosts.matches(&name)) {
            named = true;
            if entry.key == key {
                return HostKeyVerdict::Trusted;
            }
        }
        let presented = fingerprint(key);
        if named { HostKeyVerdict::Mismatch { presented } } else { HostKeyVerdict::Unknown { presented } }
    }
}

/// `SHA256:<unpadded base64>` of a raw key blob, as `ssh-keygen -l` prints it.
pub fn fingerprint(key: &[u8]) -> String {
    let digest = Sha256::digest(key);
    format!("SHA256:{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest))
}

fn parse_line(line: &str) -> Option<Entry> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') || line.starts_with('@') {
        return None;
    }
    let mut fields = line.split_whitespace();
    let hosts = fields.next()?;
    let key_type = fields.next()?.to_owned();
    let key = STANDARD.decode(fields.next()?).ok()?;
    let hosts = if let Some(hashed) = hosts.strip_prefix("|1|") {
        let (salt, hash) = hashed.split_once('|')?;
        HostPattern::Hashed { salt: STANDARD.decode(salt).ok()?, hash: STANDARD.decode(hash).ok()? }
    } else {
        HostPattern::Plain(hosts.split(',').map(str::to_owned).collect())
    };
    Some(Entry { hosts, key_type, key })
}

impl HostPattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            HostPattern::Hashed { salt, hash } => {
                let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(salt) else { return false };
                mac.update(name.as_bytes());
                mac.verify_slice(hash).is_ok()
            }
            HostPattern::Plain(patterns) => {
                let mut matched = false;
                for pattern in patterns {
                    if let Some(negated) = pattern.strip_prefix('!') {
                        if wildcard(negated, name) {
                            return false;
                        }
                    } else if wildcard(pattern, name) {
                        matched = true;
                    }
                }
                matched
            }
        }
    }
}

/// OpenSSH host patterns: `*` any run of characters, `?` one character; case-insensitive.
/// Greedy, going back only to the last `*` seen: time is at most pattern × name, whatever the
/// pattern (a recursive matcher is exponential in the number of `*`, and a known_hosts line of
/// many stars would hold the fetch in the host key check).
fn wildcard(pattern: &str, name: &str) -> bool {
    let (pattern, name) = (pattern.as_bytes(), name.as_bytes());
    let (mut p, mut n) = (0, 0);
    // After the last `*`: where the pattern resumes, and how much of the name the star took.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, n));
                p += 1;
            }
            Some(b'?') => (p, n) = (p + 1, n + 1),
            Some(c) if c.eq_ignore_ascii_case(&name[n]) => (p, n) = (p + 1, n + 1),
            _ => match star {
                Some((resume, taken)) => {
                    star = Some((resume, taken + 1));
                    (p, n) = (resume, taken + 1);
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    fn key() -> Vec<u8> {
        STANDARD.decode(KEY).unwrap()
    }

    #[test]
    fn matching_entry_on_a_custom_port_is_trusted() {
        let known = KnownHosts::parse(&format!("# comment\n[127.0.0.1]:2222 ssh-ed25519 {KEY}\n"));
        assert_eq!(known.verify("127.0.0.1", 2222, &key()), HostKeyVerdict::Trusted);
    }

    #[test]
    fn other_port_or_host_is_unknown_and_other_key_is_a_mismatch() {
        let known = KnownHosts::parse(&format!("[127.0.0.1]:2222 ssh-ed25519 {KEY}\n"));
        assert!(matches!(known.verify("127.0.0.1", 2223, &key()), HostKeyVerdict::Unknown { .. }));
        assert!(matches!(known.verify("127.0.0.1", 2222, b"other"), HostKeyVerdict::Mismatch { .. }));
    }

    #[test]
    fn hashed_entries_match_their_host() {
        // `ssh-keygen -H` form of "gitlab.example.com": HMAC-SHA1 under a salt.
        let salt = b"0123456789abcdefghij";
        let mut mac = Hmac::<Sha1>::new_from_slice(salt).unwrap();
        mac.update(b"gitlab.example.com");
        let hash = mac.finalize().into_bytes();
        let line = format!("|1|{}|{} ssh-ed25519 {KEY}", STANDARD.encode(salt), STANDARD.encode(hash));
        let known = KnownHosts::parse(&line);
        assert_eq!(known.verify("gitlab.example.com", 22, &key()), HostKeyVerdict::Trusted);
        assert!(matches!(known.verify("gitlab.example.org", 22, &key()), HostKeyVerdict::Unknown { .. }));
    }

    #[test]
    fn wildcards_and_negation_follow_openssh() {
        let known = KnownHosts::parse(&format!("*.example.com,!evil.example.com ssh-ed25519 {KEY}"));
        assert_eq!(known.verify("git.example.com", 22, &key()), HostKeyVerdict::Trusted);
        assert!(matches!(known.verify("evil.example.com", 22, &key()), HostKeyVerdict::Unknown { .. }));
    }

    /// The definition: a star takes any run of characters, tried in every way.
    fn backtracking(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => backtracking(&p[1..], n) || (!n.is_empty() && backtracking(p, &n[1..])),
            (Some(b'?'), Some(_)) => backtracking(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(b) => backtracking(&p[1..], &n[1..]),
            _ => false,
        }
    }

    /// Every string of `alphabet` up to `max` characters.
    fn strings(alphabet: &[u8], max: usize) -> Vec<Vec<u8>> {
        let mut all = vec![Vec::new()];
        let mut last = vec![Vec::new()];
        for _ in 0..max {
            last = last
                .iter()
                .flat_map(|s: &Vec<u8>| alphabet.iter().map(move |c| [s.as_slice(), &[*c]].concat()))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn wildcard_agrees_with_the_backtracking_definition_on_every_short_case() {
        let names = strings(b"aB", 6);
        for pattern in strings(b"ab*?", 5) {
            for name in &names {
                let (p, n) = (String::from_utf8(pattern.clone()).unwrap(), String::from_utf8(name.clone()).unwrap());
                assert_eq!(wildcard(&p, &n), backtracking(&pattern, name), "pattern {p:?} name {n:?}");
            }
        }
    }

    #[test]
    fn a_pattern_of_many_stars_against_a_long_name_is_answered_at_once() {
        // Exponential for a backtracking matcher (C(255, 40) ways to place the stars); found by
        // the known_hosts_parse fuzz target.
        let pattern = format!("{}b ssh-ed25519 {KEY}", "*a".repeat(40));
        let known = KnownHosts::parse(&pattern);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(known.verify(&"a".repeat(255), 22, &key())).unwrap());
        let verdict = finished.recv_timeout(std::time::Duration::from_secs(60)).expect("the host check did not finish");
        assert!(matches!(verdict, HostKeyVerdict::Unknown { .. }));
    }

    #[test]
    fn fingerprint_matches_ssh_keygen_format() {
        assert!(fingerprint(&key()).starts_with("SHA256:"));
        assert!(!fingerprint(&key()).ends_with('='));
    }
}
