//! GitLab's rules for the text of a commit status and a note: how long a field may be, one line,
//! which `target_url` it takes, which SHA it matches.

use reqwest::Url;

/// GitLab's longest commit status `description` and `target_url`, in characters.
pub(crate) const MAX_STATUS_FIELD_CHARS: usize = 255;
/// GitLab's longest note, in characters.
pub(crate) const MAX_NOTE_CHARS: usize = 1_000_000;
/// `text` cut to at most `max` characters (code points, as GitLab counts), on a character
/// boundary.
pub(crate) fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

/// `text` on one line: line breaks and other control characters become spaces.
pub(crate) fn single_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// `url` trimmed when GitLab accepts it as a `target_url`: `http`/`https` with a host, no
/// userinfo, no line break, at most [`MAX_STATUS_FIELD_CHARS`] characters.
pub(crate) fn acceptable_target_url(url: &str) -> Option<String> {
    let url = url.trim();
    if url.is_empty() || url.chars().count() > MAX_STATUS_FIELD_CHARS || url.chars().any(char::is_control) {
        return None;
    }
    let parsed = Url::parse(url).ok()?;
    let ok = matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some_and(|h| !h.is_empty())
        && parsed.username().is_empty()
        && parsed.password().is_none();
    ok.then(|| url.to_owned())
}

/// Whether `sha` is a full commit id (40 hex digits, or 64 for SHA-256 repositories).
pub(crate) fn is_full_sha(sha: &str) -> bool {
    matches!(sha.len(), 40 | 64) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}
