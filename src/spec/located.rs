//! Where in the spec file a problem is: [`SpecError`] with its line, column and snippet.

use std::fmt;
use std::path::{Path, PathBuf};

use tune_search::did_you_mean;

use super::InvalidSetting;

/// A spec that cannot be used: which file, where, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    pub file: PathBuf,
    /// 1-based line and column, when the problem has a place in the file.
    pub location: Option<(usize, usize)>,
    pub message: String,
    /// The offending line of the file, shown under the message.
    pub snippet: Option<String>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some((line, col)) = self.location {
            write!(f, ":{line}:{col}")?;
        }
        write!(f, ": {}", self.message)?;
        if let (Some(snippet), Some((line, col))) = (&self.snippet, self.location) {
            let gutter = line.to_string().len();
            write!(f, "\n {line} | {snippet}\n {:gutter$} | {:>col$}", "", "^")?;
        }
        Ok(())
    }
}

impl SpecError {
    /// A TOML or serde error in `text` (the file `file`), placed where toml says, or inside a
    /// tagged table where its message says.
    pub(super) fn parse(text: &str, file: &Path, e: &toml::de::Error) -> SpecError {
        let message = e.message().trim();
        let location = match e.span() {
            Some(s) => Some(within_table(text, line_col(text, s.start), message)),
            // Read from a rewritten table (a spec with several objectives): no span, but an
            // unknown key is still found by its name.
            None => message
                .strip_prefix("unknown field `")
                .and_then(|rest| rest.split('`').next())
                .and_then(|key| locate_key_anywhere(text, key)),
        };
        SpecError::at(text, file, location, with_suggestion(message))
    }

    /// A setting the spec's checks refused, placed at its key.
    pub(super) fn invalid(text: &str, file: &Path, invalid: &InvalidSetting) -> SpecError {
        let key = &invalid.field.key;
        let location = match array_table_key(key) {
            Some((table, number, inner)) => {
                locate_in_array_table(text, &format!("{}.{table}", invalid.section), number, inner)
            }
            None => locate_key(text, invalid.section, key),
        };
        SpecError::at(text, file, location, invalid.to_string())
    }

    fn at(text: &str, file: &Path, location: Option<(usize, usize)>, message: String) -> SpecError {
        SpecError {
            file: file.to_path_buf(),
            location,
            message,
            snippet: location
                .and_then(|(l, _)| text.lines().nth(l - 1))
                .map(str::to_string),
        }
    }
}

/// 1-based (line, column) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Refines a location at a table's header to the line inside it that the message is about.
/// Errors inside a tagged table (`[search]`, `[scheduler]`) come from serde's buffered
/// content, whose places toml no longer knows: it points at the header. The message names the
/// key (`unknown field `k``, or a type error as ``k`: invalid type ..`) or the value
/// (`unknown variant `v``).
fn within_table(text: &str, at: (usize, usize), message: &str) -> (usize, usize) {
    let Some(header) = text.lines().nth(at.0 - 1).map(str::trim) else {
        return at;
    };
    let Some(section) = header
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .filter(|h| !h.starts_with('['))
    else {
        return at;
    };
    let Some(quoted) = message.split('`').nth(1) else {
        return at;
    };
    // `[space]` checks the parameters together (cycles, `when` names) and names the one.
    if message.starts_with("unknown field") || message.starts_with("parameter `") {
        return locate_key(text, section.trim(), quoted).unwrap_or(at);
    }
    // A type error that `spec::tagged_naming_the_key` prefixed with its key: at the value.
    if message.starts_with('`') {
        let Some((line, _)) = locate_key(text, section.trim(), quoted) else {
            return at;
        };
        let written = text.lines().nth(line - 1).unwrap_or("");
        let value = written.split_once('=').map_or("", |(_, v)| v.trim_start());
        return (line, written.len() - value.len() + 1);
    }
    // The first line of the table whose value is the quoted one.
    text.lines()
        .enumerate()
        .skip(at.0)
        .take_while(|(_, line)| !line.trim_start().starts_with('['))
        .find_map(|(i, line)| {
            let (_, value) = line.split_once('=')?;
            let value = value.trim();
            let found = value == quoted || value.trim_matches('"') == quoted;
            found.then(|| (i + 1, line.len() - value.len() + 1))
        })
        .unwrap_or(at)
}

/// `table[N].key` (a key of the N-th table of an array of tables, from 1) as its parts.
fn array_table_key(key: &str) -> Option<(&str, usize, &str)> {
    let (table, rest) = key.split_once('[')?;
    let (number, inner) = rest.split_once("].")?;
    Some((table, number.parse().ok()?, inner))
}

/// Where `key = ...` is written in the `number`-th `[[array]]` table (from 1), else that
/// table's header.
fn locate_in_array_table(
    text: &str,
    array: &str,
    number: usize,
    key: &str,
) -> Option<(usize, usize)> {
    let header = format!("[[{array}]]");
    let mut seen = 0;
    let mut at_header = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            if at_header.is_some() {
                break;
            }
            if trimmed.trim_end() == header {
                seen += 1;
                if seen == number {
                    at_header = Some((i + 1, line.len() - trimmed.len() + 1));
                }
            }
            continue;
        }
        if at_header.is_some() {
            if let Some(rest) = trimmed.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return Some((i + 1, line.len() - trimmed.len() + 1));
                }
            }
        }
    }
    at_header
}

/// Where `key = ...` is written inside `[section]` (top level for ""), if it is.
fn locate_key(text: &str, section: &str, key: &str) -> Option<(usize, usize)> {
    let mut current = "";
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[') {
            current = rest.split(']').next().unwrap_or("").trim();
            continue;
        }
        if current == section {
            if let Some(rest) = trimmed.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return Some((i + 1, line.len() - trimmed.len() + 1));
                }
            }
        }
    }
    None
}

/// The first line, in any table, that sets `key`.
fn locate_key_anywhere(text: &str, key: &str) -> Option<(usize, usize)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let trimmed = line.trim_start();
        let rest = trimmed.strip_prefix(key)?;
        rest.trim_start()
            .starts_with('=')
            .then(|| (i + 1, line.len() - trimmed.len() + 1))
    })
}

/// Adds "did you mean" to serde's unknown field / variant messages.
fn with_suggestion(message: &str) -> String {
    let message = &message.replace(
        ", there are no fields",
        " (this algorithm or scheduler kind takes no settings)",
    );
    let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    let unknown = message.starts_with("unknown field") || message.starts_with("unknown variant");
    match quoted.split_first() {
        Some((found, candidates)) if unknown => {
            match did_you_mean(found, candidates.iter().copied()) {
                Some(s) => format!("{message} (did you mean `{s}`?)"),
                None => message.to_string(),
            }
        }
        _ => message.to_string(),
    }
}
