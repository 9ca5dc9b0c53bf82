//! Kubernetes name and label rules, as plain checks returning what would be accepted.

/// Longest DNS-1123 label (and label value, and most child names).
pub const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (most object names).
pub const MAX_SUBDOMAIN: usize = 253;

/// A DNS-1123 label: lowercase letters, digits and `-`, starting and ending alphanumeric,
/// at most 63 characters.
pub fn dns1123_label(s: &str) -> Result<(), String> {
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
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
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
pub fn label_key(s: &str) -> Result<(), String> {
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
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || (s.len() <= MAX_LABEL && qualified_name_chars(s)) {
        Ok(())
    } else {
        Err(format!(
            "`{s}` is not a valid label value; expected at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
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
}
