//! Paths a kustomization names: remote ones refused, local ones normalised lexically and kept
//! inside the repository and out of `.git`.

use super::super::files::{GIT_PATH_REFUSED, is_git_name};

/// Why a path a kustomization names is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A URL or a remote repository (`https://`, `git@host:`, `github.com/org/repo`, `?ref=`).
    Remote,
    /// An absolute path, or one with `\` or `:` (Windows drives, URLs without a scheme).
    NotRelative,
    /// `..` climbs above the repository root.
    LeavesRepository,
    /// A component is `.git`, in any letter case.
    Git,
    /// Empty.
    Empty,
}

impl Refusal {
    /// What is wrong and what would be accepted, for a problem.
    pub fn message(&self, entry: &str) -> String {
        match self {
            Refusal::Remote => format!(
                "`{entry}` is remote: cdtarget fetches nothing but the tenant's repository; copy the files into the \
                 repository and name them by a relative path"
            ),
            Refusal::NotRelative => format!(
                "`{entry}` is not a relative path; name a file or directory of the repository relative to this \
                 kustomization, with `/` between names"
            ),
            Refusal::LeavesRepository => format!(
                "`{entry}` leaves the repository; a kustomization may only name files and directories inside it"
            ),
            Refusal::Git => format!("`{entry}` {GIT_PATH_REFUSED}"),
            Refusal::Empty => "an empty path; name a file or a directory relative to this kustomization".to_owned(),
        }
    }
}

/// Whether `entry` names something remote (and would make kustomize fetch), by its shape alone.
pub(crate) fn is_remote(entry: &str) -> bool {
    let lower = entry.to_ascii_lowercase();
    lower.contains("://")
        || lower.starts_with("git@")
        || lower.starts_with("git::")
        || lower.starts_with("ssh:")
        || lower.starts_with("http:")
        || lower.starts_with("https:")
        || lower.starts_with("file:")
        || lower.contains("?ref=")
        || lower.contains("?version=")
        || lower.contains("?timeout=")
        || lower.contains("?submodules=")
        || ["github.com", "gitlab.com", "bitbucket.org", "dev.azure.com", "ssh.dev.azure.com"]
            .iter()
            .any(|host| lower == *host || lower.starts_with(&format!("{host}/")))
}

/// Whether the first segment of `entry` looks like a host name (`example.com/org/repo`): such an
/// entry that names nothing in the repository is what kustomize clones.
pub(crate) fn looks_like_host(entry: &str) -> bool {
    let Some((first, rest)) = entry.split_once('/') else { return false };
    let labels: Vec<&str> = first.split('.').collect();
    !rest.is_empty()
        && labels.len() >= 2
        && labels.iter().all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        && labels.last().is_some_and(|tld| tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic()))
}

/// `entry` (as written in the kustomization in directory `dir`) as a root-relative, normalised
/// path: `.` and empty segments dropped, `..` resolved lexically (symlinks are the `Files`
/// reader's business). A `.git` segment anywhere in `entry` is refused, even one a later `..`
/// would leave (the kernel would still pass through it).
pub fn resolve(dir: &str, entry: &str) -> Result<String, Refusal> {
    if entry.trim().is_empty() {
        return Err(Refusal::Empty);
    }
    if is_remote(entry) {
        return Err(Refusal::Remote);
    }
    if entry.starts_with('/') || entry.contains('\\') || entry.contains(':') || entry.contains('\0') {
        return Err(Refusal::NotRelative);
    }
    if entry.split('/').any(|segment| is_git_name(segment.as_bytes())) {
        return Err(Refusal::Git);
    }
    let mut segments: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    for segment in entry.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop().ok_or(Refusal::LeavesRepository)?;
            }
            name => segments.push(name),
        }
    }
    Ok(segments.join("/"))
}

/// Whether `path` is `dir` or beneath it (both root-relative and normalised).
pub(crate) fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty() || path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// The directory of a root-relative file path (`""` for a file at the root).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_remote_repositories_are_remote() {
        for entry in [
            "https://github.com/org/repo//base?ref=v1",
            "http://example.com/x.yaml",
            "git@github.com:org/repo.git",
            "git::https://example.com/repo",
            "ssh://git@example.com/repo",
            "github.com/org/repo/base",
            "GitHub.com/org/repo",
            "gitlab.com/org/repo?ref=main",
            "base?ref=main",
            "file:///etc/passwd",
        ] {
            assert!(is_remote(entry), "{entry} is remote");
            assert_eq!(resolve("", entry), Err(Refusal::Remote), "{entry}");
        }
        for entry in ["base", "../base", "deployment.yaml", "overlays/prod", "github/base"] {
            assert!(!is_remote(entry), "{entry} is local");
        }
    }

    #[test]
    fn host_like_first_segments_are_recognised() {
        assert!(looks_like_host("example.com/org/repo"));
        assert!(looks_like_host("git.internal.example.org/team/repo"));
        assert!(!looks_like_host("base/deployment.yaml"));
        assert!(!looks_like_host("deployment.yaml"));
        assert!(!looks_like_host("v1.2/base"), "a numeric last label is no top-level domain");
    }

    #[test]
    fn paths_are_normalised_lexically_and_stay_inside() {
        assert_eq!(resolve("overlays/prod", "../../base").unwrap(), "base");
        assert_eq!(resolve("overlays/prod", "./patch.yaml").unwrap(), "overlays/prod/patch.yaml");
        assert_eq!(resolve("", "base/").unwrap(), "base");
        assert_eq!(resolve("a", "b/../c/./d").unwrap(), "a/c/d");
        assert_eq!(resolve("overlays/prod", "../../../etc/passwd"), Err(Refusal::LeavesRepository));
        assert_eq!(resolve("", ".."), Err(Refusal::LeavesRepository));
        assert_eq!(resolve("a", "../../a"), Err(Refusal::LeavesRepository), "even when it would come back");
        assert_eq!(resolve("", "/etc/passwd"), Err(Refusal::NotRelative));
        assert_eq!(resolve("", "C:\\base"), Err(Refusal::NotRelative));
        assert_eq!(resolve("", " "), Err(Refusal::Empty));
    }

    #[test]
    fn paths_through_git_are_refused_in_any_case_however_they_get_there() {
        for entry in [".git/config", ".GIT/x.yaml", "base/../.Git/config", "./.git", "a/.gIt/b", ".git/../base"] {
            assert_eq!(resolve("overlays/prod", entry), Err(Refusal::Git), "{entry}");
            assert!(Refusal::Git.message(entry).contains("outside `.git`"), "says what is accepted");
        }
        assert_eq!(resolve("", ".github/base").unwrap(), ".github/base");
        assert_eq!(resolve("", ".gitignore").unwrap(), ".gitignore");
        assert_eq!(resolve("", "git/base").unwrap(), "git/base");
    }

    #[test]
    fn within_compares_whole_segments() {
        assert!(is_within("base/x.yaml", "base"));
        assert!(is_within("base", "base"));
        assert!(!is_within("base2/x.yaml", "base"));
        assert!(is_within("anything", ""));
        assert_eq!(parent("a/b/c.yaml"), "a/b");
        assert_eq!(parent("c.yaml"), "");
    }
}
