//! libpq's `key = value` form of connection settings (`host=db user=tune sslmode=require`),
//! read and written: the TLS settings are taken out of it, and the password out of what is
//! shown.

/// libpq's `key = value` settings, values optionally in single quotes with `\` escapes.
pub(crate) fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("expected `=` after {key:?}"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("the quoted value of {key:?} is not closed")),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// `key=value` as [`key_values`] reads it back, the value quoted where it must be.
pub(crate) fn key_value(key: &str, value: &str) -> String {
    if !value.is_empty() && !value.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\') {
        return format!("{key}={value}");
    }
    format!(
        "{key}='{}'",
        value.replace('\\', "\\\\").replace('\'', "\\'")
    )
}
