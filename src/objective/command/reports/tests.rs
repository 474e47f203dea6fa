use super::*;

#[test]
fn json_and_pair_reports() {
    let mut p = ReportParser::new("loss");
    let (step, m) = p
        .feed(r#"{"step": 3, "loss": 0.5, "name": "x"}"#)
        .unwrap()
        .unwrap();
    assert_eq!(step, Some(3));
    assert_eq!(m, BTreeMap::from([("loss".to_string(), 0.5)]));
    assert_eq!(p.feed("Epoch 3 done"), Ok(None));
    assert_eq!(p.feed("acc: 0.9"), Ok(None));
    let (step, m) = p.feed("loss: 0.25, lr: 1e-3").unwrap().unwrap();
    assert_eq!(step, None);
    assert_eq!(m.len(), 3);
    assert_eq!(m["acc"], 0.9);
    assert_eq!(m["lr"], 0.001);
}

#[test]
fn json_without_the_metric_is_still_a_report() {
    let mut p = ReportParser::new("loss");
    let (_, m) = p.feed(r#"{"acc": 0.5}"#).unwrap().unwrap();
    assert!(!m.contains_key("loss"));
}

#[test]
fn python_non_finite_numbers_are_read() {
    let mut p = ReportParser::new("loss");
    let (_, m) = p.feed(r#"{"loss": NaN, "b": -Infinity}"#).unwrap().unwrap();
    assert!(m["loss"].is_nan());
    assert_eq!(m["b"], f64::NEG_INFINITY);
    let (_, m) = p.feed("loss: nan").unwrap().unwrap();
    assert!(m["loss"].is_nan());
}

#[test]
fn log_lines_are_not_reports() {
    let mut p = ReportParser::new("loss");
    for line in [
        "",
        "hello world",
        "time: 12:30",
        "loss is: 3",
        "{not json",
        "{'loss': 0.5}",
    ] {
        assert_eq!(p.feed(line), Ok(None), "{line}");
    }
}

#[test]
fn a_metric_that_is_not_a_number_and_a_step_that_is_not_one_are_named() {
    let mut p = ReportParser::new("loss");
    for (line, why) in [
        (
            r#"{"step": 1, "loss": "0.5"}"#,
            r#"`loss` is the string "0.5", expected a number"#,
        ),
        (r#"{"loss": null}"#, "`loss` is null, expected a number"),
        (
            r#"{"loss": [1]}"#,
            "`loss` is the list [1], expected a number",
        ),
        (
            r#"{"step": -1, "loss": 0.5}"#,
            "`step` is -1, expected a whole number from 0 to 9e15",
        ),
        (
            r#"{"step": 1.5, "loss": 0.5}"#,
            "`step` is 1.5, expected a whole number",
        ),
        (
            r#"{"step": "3", "loss": 0.5}"#,
            r#"`step` is the string "3", expected a whole number"#,
        ),
        (
            "step: -2, loss: 0.5",
            "`step` is -2, expected a whole number",
        ),
    ] {
        let e = p.feed(line).unwrap_err();
        assert!(
            e.starts_with(&format!("a report could not be read ({why}")),
            "{line}: {e}"
        );
    }
    // Other fields that are not numbers are not metrics, and no error.
    let (_, m) = p
        .feed(r#"{"loss": 0.5, "phase": "train"}"#)
        .unwrap()
        .unwrap();
    assert_eq!(m.keys().collect::<Vec<_>>(), ["loss"]);
}

#[test]
fn a_report_in_form_that_cannot_be_read_is_an_error_not_a_log_line() {
    let mut p = ReportParser::new("loss");
    let e = p.feed(r#"{"step": 1, "loss": 1e400}"#).unwrap_err();
    assert!(
        e.starts_with("a report could not be read (number out of range"),
        "{e}"
    );
    assert!(e.ends_with(r#": {"step": 1, "loss": 1e400}"#), "{e}");
    // A key-value line with such a number reads as infinite (the metric check fails it).
    let (_, m) = p.feed("loss: 1e400").unwrap().unwrap();
    assert_eq!(m["loss"], f64::INFINITY);
}
