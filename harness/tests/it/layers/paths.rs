//! The module paths a Rust source text names: every `use` tree, nested groups included
//! (`use crate::{a::{b, c}, d}`), and every inline path (`crate::a::b::f()`), comments
//! included (a path in a doc example is a dependency too).

/// One path as written, from its first segment (`crate`, `super`, `self` or a crate name).
pub type Written = Vec<String>;

/// Every path of `text` that starts with one of `roots` (`crate`, `super`, `self`,
/// `rlharness`, ...), each expanded to one path per leaf of its tree.
pub fn paths(text: &str, roots: &[&str]) -> Vec<Written> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start_ok = text.is_char_boundary(i)
            && (i == 0 || !is_ident(bytes[i - 1] as char) && bytes[i - 1] != b':');
        let root = roots
            .iter()
            .find(|r| start_ok && text[i..].starts_with(&format!("{r}::")));
        match root {
            Some(_) => {
                let mut p = Parser { text, pos: i };
                p.tree(Vec::new(), &mut out);
                i = p.pos.max(i + 1);
            }
            None => i += 1,
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn ident(&mut self) -> Option<String> {
        let rest = &self.text[self.pos..];
        let n = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        (n > 0).then(|| {
            self.pos += n;
            rest[..n].to_string()
        })
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.text[self.pos..].starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    /// A use tree after `prefix`: `a::b`, `a::{tree, tree}`, `a::*`, `a as b`.
    fn tree(&mut self, mut prefix: Written, out: &mut Vec<Written>) {
        loop {
            self.skip_space();
            if self.eat("{") {
                loop {
                    if self.eat("}") {
                        return;
                    }
                    self.tree(prefix.clone(), out);
                    if !self.eat(",") {
                        self.eat("}");
                        return;
                    }
                }
            }
            if self.eat("*") {
                out.push(prefix);
                return;
            }
            match self.ident() {
                Some(seg) if seg == "self" && !prefix.is_empty() => {}
                Some(seg) => prefix.push(seg),
                None => {
                    if !prefix.is_empty() {
                        out.push(prefix);
                    }
                    return;
                }
            }
            let before = self.pos;
            if !self.eat("::") {
                self.pos = before;
                out.push(prefix);
                // `a as b`: the alias names nothing new.
                if self.eat(" as ") || self.eat("as ") {
                    self.skip_space();
                    self.ident();
                }
                return;
            }
        }
    }
}

#[test]
fn nested_groups_and_inline_paths_are_read() {
    let text = "use crate::{a::{b, c::D}, e};\nlet x = crate::f::g::h(); // see crate::i\n\
                use super::{self, j as k, l};\nmy_crate::z; use crate::a::*;";
    let got: Vec<String> = paths(text, &["crate", "super"])
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "crate::a::b",
            "crate::a::c::D",
            "crate::e",
            "crate::f::g::h",
            "crate::i",
            "super",
            "super::j",
            "super::l",
            "crate::a",
        ]
    );
}
