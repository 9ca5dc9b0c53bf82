//! Kubernetes name and label rules, as plain checks returning what would be accepted.

/// Longest DNS-1123 label (and label value, and most child names).
pub(crate) const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (most object names).
pub(crate) const MAX_SUBDOMAIN: usize = 253;

/// A DNS-1123 label: lowercase letters, digits and `-`, starting and ending alphanumeric,
/// at most 63 characters.
pub(crate) fn dns1123_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty; expected a DNS-1123 label such as `my-agents`".into());
    }
    if s.len() > MAX_LABEL {
        return Err(format!("is {} characters long; at most {MAX_LABEL} are allowed", s.len()));
    }
    let ok_chars = s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = is_alnum_lower(s.as_bytes()[0]) && is_alnum_lower(s.as_bytes()[s.len() - 1]);
    if ok_chars && ok_ends {
        Ok(())
    } else {
        Err(format!(
            "`{s}` is not a DNS-1123 label; use lowercase letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty; expected a name such as `my-secret`".into());
    }
    if s.len() > MAX_SUBDOMAIN {
        return Err(format!("is {} characters long; at most {MAX_SUBDOMAIN} are allowed", s.len()));
    }
    let ok = s.split('.').all(|part| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && is_alnum_lower(part.as_bytes()[0])
            && is_alnum_lower(part.as_bytes()[part.len() - 1])
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{s}` is not a valid name; use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ))
    }
}

/// A label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters of letters, digits, `-`, `_` and `.`, starting and ending alphanumeric.
pub(crate) fn label_key(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(prefix) = prefix {
        dns1123_subdomain(prefix).map_err(|e| format!("label key prefix {e}"))?;
    }
    if name.is_empty() || name.len() > MAX_LABEL || !qualified_name_chars(name) {
        return Err(format!(
            "`{s}` is not a valid label key; expected an optional `prefix/` and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_` and `.`, starting and ending
/// alphanumeric.
pub(crate) fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || (s.len() <= MAX_LABEL && qualified_name_chars(s)) {
        Ok(())
    } else {
        Err(format!(
            "`{s}` is not a valid label value; expected at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

/// Longest kind accepted (the API server holds the lowercased kind to a DNS-1035 label).
pub(crate) const MAX_KIND: usize = 63;

/// A named API group (`apps`, `cilium.io`): a DNS-1123 subdomain. The core group is the empty
/// string, which callers accept or refuse themselves.
pub(crate) fn api_group(s: &str) -> Result<(), String> {
    dns1123_subdomain(s).map_err(|_| {
        format!(
            "`{}` is not an API group; expected a DNS-1123 subdomain of lowercase letters, digits, '-' and '.', such as `apps` or `cilium.io`",
            shown(s)
        )
    })
}

/// An API version (`v1`, `v1beta2`): a DNS-1035 label, as the API server requires of every
/// served version.
pub(crate) fn api_version(s: &str) -> Result<(), String> {
    let bytes = s.as_bytes();
    let ok = !s.is_empty()
        && s.len() <= MAX_LABEL
        && bytes[0].is_ascii_lowercase()
        && is_alnum_lower(bytes[bytes.len() - 1])
        && bytes.iter().all(|b| is_alnum_lower(*b) || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not an API version; expected a lowercase letter followed by lowercase letters, digits or '-' (at most {MAX_LABEL}), such as `v1` or `v1beta2`",
            shown(s)
        ))
    }
}

/// A kind (`ConfigMap`, `CiliumNetworkPolicy`): an upper-case letter followed by letters and
/// digits, at most [`MAX_KIND`] characters.
pub(crate) fn kind(s: &str) -> Result<(), String> {
    let bytes = s.as_bytes();
    let ok = !s.is_empty()
        && s.len() <= MAX_KIND
        && bytes[0].is_ascii_uppercase()
        && bytes.iter().all(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a kind; expected an upper-case letter followed by letters and digits (at most {MAX_KIND}), such as `ConfigMap`",
            shown(s)
        ))
    }
}

/// Untrusted text as shown in a message: control characters escaped, at most 64 characters.
pub(crate) fn shown(s: &str) -> String {
    const MAX_SHOWN: usize = 64;
    let escaped: String = s.chars().take(MAX_SHOWN).flat_map(char::escape_debug).collect();
    if s.chars().nth(MAX_SHOWN).is_some() { format!("{escaped}…") } else { escaped }
}

fn qualified_name_chars(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(dns1123_label("agents-1").is_ok());
        assert!(dns1123_label("Agents").is_err());
        assert!(dns1123_label("-a").is_err());
        assert!(dns1123_label(&"a".repeat(64)).is_err());
        assert!(dns1123_subdomain("my.secret-1").is_ok());
        assert!(dns1123_subdomain("my..secret").is_err());
        assert!(label_key("example.com/team").is_ok());
        assert!(label_key("team").is_ok());
        assert!(label_key("Bad Key").is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("v1.2_x").is_ok());
        assert!(label_value("a b").is_err());
    }

    #[test]
    fn api_groups_versions_and_kinds_follow_kubernetes() {
        for group in ["apps", "cilium.io", "crd.projectcalico.org"] {
            assert!(api_group(group).is_ok(), "{group}");
        }
        for group in ["", "Apps", "a/b", "..", "a..b", "-a.io"] {
            assert!(api_group(group).is_err(), "{group}");
        }
        for version in ["v1", "v1beta2", "v2alpha1", "v1-preview"] {
            assert!(api_version(version).is_ok(), "{version}");
        }
        for version in ["", "V1", "1", "v1/..", "..", "v1-", &format!("v{}", "1".repeat(63))] {
            assert!(api_version(version).is_err(), "{version}");
        }
        for kind in ["ConfigMap", "CDTarget", "KafkaMirrorMaker2"] {
            assert!(kind_ok(kind), "{kind}");
        }
        for kind in ["", "configMap", "../../secrets", "Config-Map", "Config Map", "Cönfig", &"A".repeat(64)] {
            assert!(!kind_ok(kind), "{kind}");
        }
    }

    fn kind_ok(s: &str) -> bool {
        kind(s).is_ok()
    }

    #[test]
    fn shown_text_is_bounded_and_escaped() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown(&"x".repeat(100)), format!("{}…", "x".repeat(64)));
    }
}
