//! Every code block of README.md and docs/ is checked, so that the book cannot drift from what
//! tune does: Rust blocks are doctests (`src/lib.rs` includes each page that has one), TOML
//! blocks are specs tune accepts, shell blocks name commands, flags, files and benches that
//! exist, excerpts match the files they quote, and every relative link resolves.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository, whose README and docs/ are checked.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// One fenced block: the page, its first line (1-based), the fence's info string, the
/// comment line before it (a `<!-- ... -->` marker, if any) and its text.
struct Block {
    page: PathBuf,
    line: usize,
    lang: String,
    marker: Option<String>,
    text: String,
}

impl Block {
    fn place(&self) -> String {
        format!("{}:{}", self.page.display(), self.line)
    }
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![Path::new(ROOT).join("README.md")];
    walk(&Path::new(ROOT).join("docs"), &mut out);
    out
}

fn relative(path: &Path) -> PathBuf {
    path.strip_prefix(ROOT).unwrap().to_path_buf()
}

fn blocks(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut previous = "";
    for (i, line) in text.lines().enumerate() {
        match open.as_mut() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    let marker = previous
                        .trim()
                        .strip_prefix("<!--")
                        .and_then(|m| m.strip_suffix("-->"))
                        .map(|m| m.trim().to_string());
                    open = Some(Block {
                        page: relative(page),
                        line: i + 1,
                        lang: info.trim().to_string(),
                        marker,
                        text: String::new(),
                    });
                }
            }
            Some(block) => {
                if line.starts_with("```") {
                    out.push(open.take().unwrap());
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
            }
        }
        previous = line;
    }
    assert!(
        open.is_none(),
        "{}: a code block is never closed",
        page.display()
    );
    out
}

fn all_blocks() -> Vec<Block> {
    pages().iter().flat_map(|p| blocks(p)).collect()
}

#[test]
fn every_block_says_what_it_holds() {
    let known = ["rust", "toml", "sh", "text", "python"];
    for block in all_blocks() {
        let lang = block.lang.split(',').next().unwrap_or("");
        assert!(
            known.contains(&lang),
            "{}: a block of `{}`; each block names one of {known:?}, so that this test knows \
             how to check it",
            block.place(),
            block.lang
        );
    }
}

#[test]
fn every_page_with_rust_is_compiled_as_doctests() {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    for page in pages() {
        let has_rust = blocks(&page).iter().any(|b| b.lang.starts_with("rust"));
        let included = format!("include_str!(\"../{}\")", relative(&page).display());
        assert_eq!(
            has_rust,
            lib.contains(&included),
            "{}: a page with Rust blocks is included in src/lib.rs as doctests ({included}), \
             and only such a page",
            relative(&page).display()
        );
    }
}

/// A page's TOML block is a whole spec, or a part of one (some sections); a part is checked
/// laid over the smallest spec, its sections replacing the small spec's.
fn as_spec(block: &Block) -> String {
    let part: toml::Table =
        toml::from_str(&block.text).unwrap_or_else(|e| panic!("{}: not TOML: {e}", block.place()));
    if part.contains_key("name") && part.contains_key("space") {
        return block.text.clone();
    }
    let mut spec: toml::Table = toml::from_str(
        r#"
name = "docs"
metric = "loss"
mode = "min"
samples = 4
[objective]
command = ["true"]
[space]
x = { uniform = [0.0, 1.0] }
"#,
    )
    .unwrap();
    let builtin = part
        .get("objective")
        .and_then(|o| o.get("builtin"))
        .is_some();
    if builtin && !part.contains_key("metric") {
        spec.insert("metric".into(), "val_loss".into());
    }
    for (key, value) in part {
        spec.insert(key, value);
    }
    toml::to_string(&spec).unwrap()
}

#[test]
fn toml_blocks_are_specs_tune_accepts() {
    let mut checked = 0;
    for block in all_blocks().iter().filter(|b| b.lang == "toml") {
        let text = as_spec(block);
        let file = PathBuf::from(block.place());
        if let Err(e) = tune::ExperimentSpec::from_toml(&text, &file) {
            panic!("{}: tune refuses this spec:\n{e}\n{text}", block.place());
        }
        checked += 1;
    }
    assert!(checked >= 6, "only {checked} TOML blocks found");
}

/// `<!-- the file PATH -->` before a block: the block is that file, whole.
/// `<!-- from PATH -->`: the block's lines are lines of that file, in a row.
#[test]
fn blocks_that_quote_a_file_quote_it_as_it_is() {
    let mut quoted = 0;
    for block in all_blocks() {
        let Some(marker) = &block.marker else {
            continue;
        };
        let (whole, path) = if let Some(p) = marker.strip_prefix("the file ") {
            (true, p)
        } else if let Some(p) = marker.strip_prefix("from ") {
            (false, p)
        } else {
            continue;
        };
        let file = std::fs::read_to_string(Path::new(ROOT).join(path))
            .unwrap_or_else(|e| panic!("{}: cannot read {path}: {e}", block.place()));
        if whole {
            assert_eq!(
                block.text,
                file,
                "{}: the block is not {path} as it is",
                block.place()
            );
        } else {
            let lines: Vec<&str> = file.lines().collect();
            let want: Vec<&str> = block.text.lines().collect();
            assert!(
                lines.windows(want.len()).any(|w| w == want.as_slice()),
                "{}: these lines are not lines of {path} in a row",
                block.place()
            );
        }
        quoted += 1;
    }
    assert!(quoted >= 2, "only {quoted} quoting blocks found");
}

/// The commands of shell blocks, one per line: comments dropped, `\` continuations joined,
/// `[`/`]` of optional parts taken away.
fn commands(block: &Block) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.text.lines() {
        let line = match line.find(" #") {
            Some(i) => &line[..i],
            None if line.trim_start().starts_with('#') => "",
            None => line,
        };
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(line);
        let words: Vec<String> = pending
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())
            .filter(|w| !w.is_empty())
            .collect();
        if !words.is_empty() {
            out.push(words);
        }
        pending.clear();
    }
    out
}

fn help_of(subcommand: &str, cache: &mut BTreeMap<String, String>) -> String {
    cache
        .entry(subcommand.to_string())
        .or_insert_with(|| {
            let out = common::tune()
                .args([subcommand, "--help"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "`tune {subcommand} --help` failed: the docs name a command tune lacks\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .clone()
}

/// Every bench, by name, with the package that has it (`cargo bench -p PACKAGE --bench NAME`).
fn benches() -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for manifest in ["Cargo.toml", "cli/Cargo.toml"] {
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(Path::new(ROOT).join(manifest)).unwrap())
                .unwrap();
        let package = manifest["package"]["name"].as_str().unwrap().to_string();
        for bench in manifest["bench"].as_array().unwrap() {
            let name = bench["name"].as_str().unwrap().to_string();
            all.insert(name, package.clone());
        }
    }
    all
}

#[test]
fn shell_blocks_name_commands_flags_files_and_benches_that_exist() {
    let mut help = BTreeMap::new();
    let benches = benches();
    let mut tune_commands = 0;
    for block in all_blocks().iter().filter(|b| b.lang == "sh") {
        for words in commands(block) {
            let place = format!("{}: `{}`", block.place(), words.join(" "));
            let start = words.iter().position(|w| !w.contains('=')).unwrap_or(0);
            let words = &words[start..];
            let tune_args: Option<&[String]> = match words.first().map(String::as_str) {
                Some("tune") => Some(&words[1..]),
                Some("cargo") if words.get(1).is_some_and(|w| w == "run") => words
                    .iter()
                    .position(|w| w == "--")
                    .map(|i| &words[i + 1..]),
                _ => None,
            };
            if let Some(args) = tune_args {
                let subcommand = &args[0];
                let text = help_of(subcommand, &mut help);
                for flag in args.iter().filter(|a| a.starts_with("--")) {
                    let flag = flag.split('=').next().unwrap();
                    assert!(
                        text.split(|c: char| !(c.is_alphanumeric() || c == '-'))
                            .any(|w| w == flag),
                        "{place}: `tune {subcommand}` has no {flag}"
                    );
                }
                tune_commands += 1;
            }
            if words.first().is_some_and(|w| w == "cargo") {
                if let Some(i) = words.iter().position(|w| w == "--bench") {
                    let name = &words[i + 1];
                    let package = words
                        .iter()
                        .position(|w| w == "-p" || w == "--package")
                        .map_or("tune", |p| words[p + 1].as_str());
                    assert_eq!(
                        benches.get(name).map(String::as_str),
                        Some(package),
                        "{place}: no bench {name} in package {package}"
                    );
                }
            }
            for word in words {
                let looks_like_ours = [
                    "examples/",
                    "scripts/",
                    "benches/",
                    "tests/",
                    "docs/",
                    "cli/",
                    "testkit/",
                ]
                .iter()
                .any(|p| word.starts_with(p));
                if looks_like_ours {
                    assert!(
                        Path::new(ROOT).join(word).exists(),
                        "{place}: {word} does not exist"
                    );
                }
            }
        }
    }
    assert!(
        tune_commands >= 20,
        "only {tune_commands} tune commands found"
    );
}

#[test]
fn the_layout_names_folders_that_exist() {
    let block = blocks(&Path::new(ROOT).join("docs/design/layout.md"))
        .into_iter()
        .find(|b| b.lang == "text")
        .expect("docs/design/layout.md has its layout block");
    let mut named = 0;
    for line in block.text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if !line.starts_with(' ') && !first.is_empty() {
            assert!(
                Path::new(ROOT).join(first).exists(),
                "{}: the layout names {first}, which is not in the repository",
                block.place()
            );
            named += 1;
        }
    }
    assert!(named >= 8, "only {named} entries in the layout");
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut inside = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            inside = !inside;
        } else if !inside && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn relative_links_lead_to_files_and_headings_that_exist() {
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target, None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let place = format!("{}: link {target}", relative(&page).display());
            assert!(file.exists(), "{place}: no such file");
            if let Some(fragment) = fragment {
                assert!(
                    anchors(&file).contains(fragment),
                    "{place}: no heading #{fragment} there"
                );
            }
            links += 1;
        }
    }
    assert!(links >= 30, "only {links} links found");
}
