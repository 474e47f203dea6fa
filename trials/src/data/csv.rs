//! CSV readers: scikit-learn's shipped files, and a user's own file with a header line.

use std::collections::BTreeMap;
use std::path::Path;

use super::Dataset;
use crate::TrialsError;

/// scikit-learn's layout: an optional `rows,features,<class names>` line, then rows of
/// features followed by an integer label.
pub(super) fn parse_sklearn(name: &str, text: &str) -> Result<Dataset, TrialsError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).peekable();
    let first = lines.peek().copied().unwrap_or_default();
    let second = text.lines().nth(1).unwrap_or_default();
    if first.split(',').count() != second.split(',').count() {
        lines.next(); // the header: counts and class names
    }
    let (mut x, mut y, mut width) = (Vec::new(), Vec::new(), None);
    for (i, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        let bad = || TrialsError::Data(format!("{name}: row {}: cannot parse \"{line}\"", i + 1));
        if *width.get_or_insert(fields.len()) != fields.len() || fields.len() < 2 {
            return Err(bad());
        }
        for f in &fields[..fields.len() - 1] {
            x.push(f.trim().parse::<f32>().map_err(|_| bad())?);
        }
        y.push(
            fields[fields.len() - 1]
                .trim()
                .parse::<u32>()
                .map_err(|_| bad())?,
        );
    }
    let features = width.map_or(0, |w| w - 1);
    let classes = y.iter().max().map_or(0, |&m| m as usize + 1);
    Ok(Dataset {
        name: name.to_string(),
        x,
        y,
        features,
        classes,
        image: None,
    })
}

/// Reads a user's CSV: a header line naming the columns, then one row per sample. Every
/// column but `target` (default: the last) must be numeric; the target's distinct values
/// (numbers or names) become the classes, in sorted order.
///
/// ```no_run
/// let data = tune_trials::read_csv("flowers.csv".as_ref(), Some("species")).unwrap();
/// println!("{} rows, {} classes", data.len(), data.classes);
/// ```
pub fn read_csv(path: &Path, target: Option<&str>) -> Result<Dataset, TrialsError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| TrialsError::Data(format!("{shown}: cannot read the file: {e}")))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(TrialsError::Data(format!("{shown}: the file is empty")));
    };
    let columns = split_fields(header);
    let label_col = match target {
        None => columns.len() - 1,
        Some(t) => columns.iter().position(|c| *c == t).ok_or_else(|| {
            let hint = tune_search::did_you_mean_hint(t, columns.iter().copied());
            TrialsError::Data(format!(
                "{shown}: target: no column \"{t}\" in the header ({}){hint}",
                columns.join(", ")
            ))
        })?,
    };
    if columns.len() < 2 {
        return Err(TrialsError::Data(format!(
            "{shown}:1: expected a header with at least two columns, found \"{header}\""
        )));
    }
    let (mut x, mut labels) = (Vec::new(), Vec::new());
    for (i, line) in lines {
        let fields = split_fields(line);
        if fields.len() != columns.len() {
            return Err(TrialsError::Data(format!(
                "{shown}:{}: expected {} fields like the header, found {}",
                i + 1,
                columns.len(),
                fields.len()
            )));
        }
        for (j, f) in fields.iter().enumerate() {
            if j == label_col {
                labels.push(f.to_string());
            } else {
                let v = f.parse::<f32>().ok().filter(|v| v.is_finite());
                x.push(v.ok_or_else(|| {
                    TrialsError::Data(format!(
                        "{shown}:{}: column `{}`: expected a number, found \"{f}\"",
                        i + 1,
                        columns[j]
                    ))
                })?);
            }
        }
    }
    let classes = class_names(&labels);
    if classes.len() < 2 {
        return Err(TrialsError::Data(format!(
            "{shown}: target column `{}` needs at least two classes, found {}",
            columns[label_col],
            classes.len()
        )));
    }
    let index: BTreeMap<&str, u32> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i as u32))
        .collect();
    Ok(Dataset {
        name: shown.to_string(),
        y: labels.iter().map(|l| index[l.as_str()]).collect(),
        x,
        features: columns.len() - 1,
        classes: classes.len(),
        image: None,
    })
}

/// A line's comma-separated fields, trimmed and unquoted.
fn split_fields(line: &str) -> Vec<&str> {
    line.split(',')
        .map(|c| c.trim().trim_matches('"'))
        .collect()
}

/// The distinct labels in order: numeric labels as numbers (2 before 10), names as text.
fn class_names(labels: &[String]) -> Vec<String> {
    let mut classes: Vec<String> = labels.to_vec();
    let numbers: Option<Vec<f64>> = labels.iter().map(|l| l.parse::<f64>().ok()).collect();
    match numbers {
        Some(_) => {
            let number = |c: &String| c.parse::<f64>().unwrap_or(f64::NAN);
            classes.sort_by(|a, b| number(a).total_cmp(&number(b)));
        }
        None => classes.sort(),
    }
    classes.dedup();
    classes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn user_csv_with_named_labels_and_a_chosen_target() {
        let f = write("a,species,b\n1.5,setosa,2\n3,virginica,4\n5,setosa,6\n");
        let d = read_csv(f.path(), Some("species")).unwrap();
        assert_eq!(d.x, vec![1.5, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!((d.y.clone(), d.features, d.classes), (vec![0, 1, 0], 2, 2));
        let f = write("a,label\n1,10\n2,2\n3,10\n");
        assert_eq!(read_csv(f.path(), None).unwrap().y, vec![1, 0, 1]);
    }

    #[test]
    fn user_csv_errors_name_the_line_and_column() {
        let f = write("a,b,label\n1,2,x\n1,oops,y\n");
        let e = read_csv(f.path(), None).unwrap_err().to_string();
        assert!(
            e.contains(":3: column `b`: expected a number, found \"oops\""),
            "{e}"
        );
        let e = read_csv(f.path(), Some("lable")).unwrap_err().to_string();
        assert!(
            e.contains("no column \"lable\"") && e.contains("did you mean `label`?"),
            "{e}"
        );
        let f = write("a,label\n1,x\n2\n");
        let e = read_csv(f.path(), None).unwrap_err().to_string();
        assert!(
            e.contains(":3: expected 2 fields like the header, found 1"),
            "{e}"
        );
        let f = write("a,label\n1,x\n2,x\n");
        let e = read_csv(f.path(), None).unwrap_err().to_string();
        assert!(e.contains("at least two classes"), "{e}");
    }
}
