//! The benchmarks' own command-line arguments: counts, written `1000` or `1_000`.

/// `text` as a count above zero, or the message a usage line starts with.
pub fn positive(text: &str) -> Result<usize, String> {
    text.trim()
        .replace('_', "")
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{text}` is not a positive number (write 1000 or 1_000)"))
}
