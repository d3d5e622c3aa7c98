//! What one source file says, read with `syn`: the modules it declares, and every path it
//! names, each marked as code that ships or test code by the attributes above it, never by
//! where it sits in the text.
//!
//! Test code is an item under `#[cfg(test)]` (or a `cfg` whose predicate needs `test`), a
//! `#[test]` function, everything inside such an item, and the file of a module declared under
//! one (`#[cfg(test)] mod tests;`, wherever in the file it is declared).
//!
//! The paths read: every `use` tree (nested groups expanded, one path per leaf), every path of
//! an expression, a type or a pattern, the paths in a macro's tokens, and the paths an
//! attribute names (`#[serde(with = "crate::a::b")]`, and a doc comment's, since an intra-doc
//! link is a dependency too).

use std::collections::BTreeSet;

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::{self, Visit};

use super::paths::{paths, Written};

/// One path as written, the inline module it is written in (relative to the file's module)
/// and whether it is test code.
#[derive(Debug, Clone)]
pub struct Use {
    pub inline: Vec<String>,
    pub path: Written,
    pub test: bool,
}

/// One `mod x;` whose body is a file of its own.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The inline modules it is declared inside (usually none), then its name.
    pub module: Vec<String>,
    pub test: bool,
}

/// One file read.
#[derive(Debug, Default)]
pub struct Source {
    pub uses: Vec<Use>,
    pub declared: Vec<Declared>,
}

/// Read a file's text; `roots` are the first segments of the paths kept (`crate`, `super`,
/// `self` and other crates' names). A file that does not parse is an error naming it.
pub fn read(file: &str, text: &str, roots: &[&str]) -> Source {
    let ast = syn::parse_file(text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut reader = Reader {
        roots,
        inline: Vec::new(),
        test: false,
        out: Source::default(),
    };
    reader.attributes(&ast.attrs);
    for item in &ast.items {
        reader.visit_item(item);
    }
    reader.out
}

struct Reader<'a> {
    roots: &'a [&'a str],
    inline: Vec<String>,
    test: bool,
    out: Source,
}

/// Whether an attribute marks test code: `#[test]`, or a `cfg` that holds only under test
/// (`cfg(test)`, `cfg(all(test, ..))`; `cfg(not(test))` is code that ships).
fn marks_test(attr: &syn::Attribute) -> bool {
    if attr.path().is_ident("test") {
        return true;
    }
    if !attr.path().is_ident("cfg") {
        return false;
    }
    let Ok(tokens) = attr.meta.require_list().map(|l| l.tokens.clone()) else {
        return false;
    };
    needs_test(tokens)
}

/// Whether a `cfg` predicate can hold only when `test` is set.
fn needs_test(tokens: TokenStream) -> bool {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    match trees.as_slice() {
        [TokenTree::Ident(i)] => i == "test",
        [TokenTree::Ident(i), TokenTree::Group(g)] if i == "all" => g
            .stream()
            .into_iter()
            .collect::<Vec<_>>()
            .split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
            .any(|part| needs_test(part.iter().cloned().collect())),
        [TokenTree::Ident(i), TokenTree::Group(g)] if i == "any" => {
            let parts: Vec<TokenStream> = g
                .stream()
                .into_iter()
                .collect::<Vec<_>>()
                .split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
                .filter(|part| !part.is_empty())
                .map(|part| part.iter().cloned().collect())
                .collect();
            !parts.is_empty() && parts.into_iter().all(needs_test)
        }
        _ => false,
    }
}

/// Every identifier of the code that ships in a file's text: its items under a test attribute
/// are left out, and comments are never read (a doc comment is a string).
pub fn shipped_idents(file: &str, text: &str) -> BTreeSet<String> {
    let ast = syn::parse_file(text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut out = BTreeSet::new();
    for item in &ast.items {
        if !item_attrs(item).iter().any(marks_test) {
            idents(item.to_token_stream(), &mut out);
        }
    }
    out
}

fn idents(tokens: TokenStream, out: &mut BTreeSet<String>) {
    for t in tokens {
        match t {
            TokenTree::Ident(i) => {
                out.insert(i.to_string());
            }
            TokenTree::Group(g) => idents(g.stream(), out),
            _ => {}
        }
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Every path in a token stream: `root :: a :: b` runs of identifiers (a macro's arguments are
/// tokens to `syn`), and with `strings`, the paths in string literals (an attribute's).
fn token_paths(tokens: TokenStream, roots: &[&str], strings: bool, out: &mut Vec<Written>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        match &trees[i] {
            TokenTree::Group(g) => token_paths(g.stream(), roots, strings, out),
            TokenTree::Literal(l) if strings => {
                if let Ok(syn::Lit::Str(s)) = syn::parse_str::<syn::Lit>(&l.to_string()) {
                    out.extend(paths(&s.value(), roots));
                }
            }
            TokenTree::Ident(id) if roots.iter().any(|r| id == r) => {
                let mut path = vec![id.to_string()];
                let mut j = i + 1;
                while let [TokenTree::Punct(a), TokenTree::Punct(b), TokenTree::Ident(next), ..] =
                    &trees[j.min(trees.len())..]
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    path.push(next.to_string());
                    j += 3;
                }
                if path.len() > 1 {
                    out.push(path);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// A `use` tree's leaves, each a whole path (`self` in a group names the group's prefix).
fn use_leaves(tree: &syn::UseTree, mut prefix: Written, out: &mut Vec<Written>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
        }
        syn::UseTree::Name(n) if n.ident == "self" && !prefix.is_empty() => out.push(prefix),
        syn::UseTree::Name(n) => {
            prefix.push(n.ident.to_string());
            out.push(prefix);
        }
        syn::UseTree::Rename(r) => {
            prefix.push(r.ident.to_string());
            out.push(prefix);
        }
        syn::UseTree::Glob(_) => out.push(prefix),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix.clone(), out);
            }
        }
    }
}

impl Reader<'_> {
    fn keep(&mut self, path: Written) {
        if path
            .first()
            .is_some_and(|s| self.roots.contains(&s.as_str()))
        {
            self.out.uses.push(Use {
                inline: self.inline.clone(),
                path,
                test: self.test,
            });
        }
    }

    fn attributes(&mut self, attrs: &[syn::Attribute]) {
        let mut found = Vec::new();
        for a in attrs {
            token_paths(a.meta.to_token_stream(), self.roots, true, &mut found);
        }
        for p in found {
            self.keep(p);
        }
    }
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let was = self.test;
        let attrs = item_attrs(item);
        self.test |= attrs.iter().any(marks_test);
        self.attributes(attrs);
        match item {
            syn::Item::Mod(m) if m.content.is_none() => {
                let mut module = self.inline.clone();
                module.push(m.ident.to_string());
                self.out.declared.push(Declared {
                    module,
                    test: self.test,
                });
            }
            syn::Item::Mod(m) => {
                self.inline.push(m.ident.to_string());
                for i in &m.content.as_ref().unwrap().1 {
                    self.visit_item(i);
                }
                self.inline.pop();
            }
            _ => visit::visit_item(self, item),
        }
        self.test = was;
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        let was = self.test;
        self.test |= f.attrs.iter().any(marks_test);
        visit::visit_impl_item_fn(self, f);
        self.test = was;
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        self.attributes(std::slice::from_ref(attr));
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, Vec::new(), &mut leaves);
        for p in leaves {
            self.keep(p);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.keep(p.segments.iter().map(|s| s.ident.to_string()).collect());
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let mut found = Vec::new();
        token_paths(m.tokens.clone(), self.roots, false, &mut found);
        for p in found {
            self.keep(p);
        }
        visit::visit_macro(self, m);
    }
}
