//! Code a derive macro writes (`#[derive(Clone)]`) has no source lines of its own: the
//! compiler places its calls on the attribute's line in one build and on the field's line
//! in another (rustc at opt-level 3 and 0 do). Both builds' lines inside one derived item,
//! from its first `#[derive(...)]` to the item's end, are read as one place, named
//! `file:FIRST-LAST`, so that the calls of one derived impl meet in one group.

use std::collections::HashMap;

/// The derived items of the source files read so far, by file.
#[derive(Debug, Default)]
pub struct Derives {
    /// Per file: the line ranges (first, last; 1-based) of its derived items, empty when
    /// the file has none or cannot be read.
    files: HashMap<String, Vec<(u32, u32)>>,
}

impl Derives {
    /// `line` (`file:N`) as the place it belongs to: `file:FIRST-LAST` when line N lies in
    /// a derived item of that file, else `line` itself.
    pub fn place(&mut self, line: &str) -> String {
        let Some((file, n)) = line
            .rsplit_once(':')
            .and_then(|(f, n)| Some((f, n.parse::<u32>().ok()?)))
        else {
            return line.to_string();
        };
        let ranges = self.files.entry(file.to_string()).or_insert_with(|| {
            std::fs::read_to_string(file)
                .map(|text| derived_items(&text))
                .unwrap_or_default()
        });
        match ranges.iter().find(|&&(a, b)| a <= n && n <= b) {
            Some((a, b)) => format!("{file}:{a}-{b}"),
            None => line.to_string(),
        }
    }
}

/// The line ranges of the items of Rust source `text` that a `#[derive(...)]` attribute
/// applies to: from the attribute's line (the first of several) to the item's last line.
pub fn derived_items(text: &str) -> Vec<(u32, u32)> {
    let lines: Vec<&str> = text.lines().map(code_of).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("#[derive(") {
            i += 1;
            continue;
        }
        let first = i;
        match item_end(&lines, i) {
            Some(last) => {
                out.push((first as u32 + 1, last as u32 + 1));
                i = last + 1;
            }
            None => i += 1,
        }
    }
    out
}

/// A line without its `//` comment.
fn code_of(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

/// The index of the last line of the item that the attribute at `from` applies to: where
/// its braces close, or its `;` at depth 0 (a unit or tuple struct). Brackets are counted
/// from the attribute on, so attributes over several lines are passed over.
fn item_end(lines: &[&str], from: usize) -> Option<usize> {
    let mut depth = 0i64;
    let mut in_item = false;
    for (k, line) in lines.iter().enumerate().skip(from) {
        in_item |= ["struct ", "enum ", "union "]
            .iter()
            .any(|word| line.contains(word));
        for c in line.chars() {
            match c {
                '{' | '(' | '[' => depth += 1,
                '}' | ')' | ']' => depth -= 1,
                _ => {}
            }
            if in_item && depth == 0 && (c == '}' || c == ';') {
                return Some(k);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_item_runs_from_its_attribute_to_its_end() {
        let text = "use x;\n\
                    #[derive(Clone)]\n\
                    struct A {\n\
                    \x20   ids: Vec<u32>, // {\n\
                    \x20   name: String,\n\
                    }\n\
                    \n\
                    #[derive(Clone, Debug)]\n\
                    #[repr(C)]\n\
                    pub struct T(Vec<u8>);\n\
                    #[derive(\n\
                    \x20   Clone,\n\
                    )]\n\
                    enum E {\n\
                    \x20   A { x: u8 },\n\
                    \x20   B(u8),\n\
                    }\n\
                    fn f() {}\n";
        assert_eq!(derived_items(text), [(2, 6), (8, 10), (11, 17)]);
    }
}
