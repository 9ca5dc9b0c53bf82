//! Text shown to people (logs, conditions, Events, GitLab statuses and comments), free of
//! secrets: redaction of tokens and URL user info, the short form of a revision, and text cut to
//! a size.
//!
//! A ground-floor module: it imports nothing of the crate, so every floor can use it.

/// Removes `secrets` and any `user:password@` part of URLs from `message`.
pub fn redact(message: &str, secrets: &[&str]) -> String {
    let mut clean = message.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        clean = clean.replace(secret, "***");
    }
    redact_userinfo(&clean)
}

/// `https://user:token@host/x` → `https://***@host/x`, wherever it appears in `text` (a message
/// that may hold several URLs and other words: the user info of each URL is its authority up to
/// the last `@`, and the authority ends at `/`, a blank, a quote or a line end).
pub fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail.find(['/', ' ', '\'', '"', '\n']).unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(userinfo_end) => {
                out.push_str("***");
                rest = &tail[userinfo_end..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// One URL a tenant wrote, however malformed (no scheme, a `/` in the password, backslashes),
/// with everything between the scheme and its last `@` replaced by `***`, so that an error never
/// repeats a password (a path after the `@` may be hidden too). Stricter than
/// [`redact_userinfo`], which must leave the `@`s of the words around a URL alone.
pub fn redact_url_userinfo(url: &str) -> String {
    let Some(at) = url.rfind('@') else { return url.to_owned() };
    let start = url.find("://").map_or(0, |i| i + 3);
    let start = if start > at { 0 } else { start };
    format!("{}***{}", &url[..start], &url[at..])
}

/// `url` with the digest after `/hook/` hidden: the path alone lets anyone trigger a sync of a
/// `generic` registration, so it is as secret as the token.
pub fn redact_hook_path(url: &str) -> String {
    match url.rfind("/hook/") {
        Some(at) => format!("{}/hook/***", &url[..at]),
        None => url.to_owned(),
    }
}

/// `text` cut to at most `max` bytes on a character boundary, `…` marking the cut.
pub fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}

/// The first 12 characters of a commit SHA, as messages, Events and GitLab texts show it (the
/// whole text when shorter).
pub fn short_revision(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_and_secrets_are_removed() {
        let message = "failed to fetch https://oauth2:glpat-secret@gitlab.example.com/a/b.git: token glpat-secret";
        let clean = redact(message, &["glpat-secret"]);
        assert_eq!(clean, "failed to fetch https://***@gitlab.example.com/a/b.git: token ***");
    }

    #[test]
    fn urls_without_userinfo_are_left_alone() {
        assert_eq!(redact_userinfo("ssh://127.0.0.1:22/x and git://h/y"), "ssh://127.0.0.1:22/x and git://h/y");
        assert_eq!(redact_userinfo("ssh://git@127.0.0.1:22/x"), "ssh://***@127.0.0.1:22/x");
    }

    #[test]
    fn a_malformed_url_never_shows_its_user_info() {
        assert_eq!(redact_url_userinfo("user:pw@host"), "***@host");
        assert_eq!(redact_url_userinfo("https://a@b@host/x"), "https://***@host/x");
        assert_eq!(redact_url_userinfo("https://user:pa/ss@host"), "https://***@host");
        assert_eq!(redact_url_userinfo("https://host/a"), "https://host/a");
    }

    #[test]
    fn a_cut_keeps_whole_characters_and_marks_itself() {
        let mut short = "ééé".to_owned();
        cut(&mut short, 6);
        assert_eq!(short, "ééé", "text within the bound is left alone");
        let mut long = "ééé".to_owned();
        cut(&mut long, 5);
        assert_eq!(long, "éé…", "the cut backs off to a character boundary");
    }

    #[test]
    fn short_revisions_are_twelve_characters_or_the_whole_text() {
        assert_eq!(short_revision("0123456789abcdef0123"), "0123456789ab");
        assert_eq!(short_revision("abc"), "abc");
    }
}
