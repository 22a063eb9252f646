//! Imports run one way: no module of `core/src` imports a module on a higher layer of the
//! layer table in `core/src/lib.rs`'s crate documentation, and no two files import each other.
//!
//! The check reads the sources (no new dependency, no compiler help), so it works on an
//! approximation of Rust's name resolution, chosen to err on the side of reporting:
//!
//! - Files are discovered under `core/src`; a file's module path comes from its file path
//!   (`a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`). Inline `mod x { .. }` blocks count as
//!   their file, and `#[path]` attributes are not followed.
//! - Comments and literals are dropped. Items under exactly `#[cfg(test)]` or `#[cfg(loom)]`
//!   (the memory-order models) are dropped, and so are the files of modules declared under
//!   them (`#[cfg(test)] mod tests;`) and files starting with `#![cfg(test)]`. Other `cfg`s
//!   count as production code.
//! - A reference is a `use` path or an inline path starting with `crate::`, `super::`,
//!   `self::` or the name of a module the file declares; anything else is taken for an
//!   external crate or a local item. It resolves to the file of the longest module prefix,
//!   then through that module's `pub use` re-exports (named ones, not globs) to the file that
//!   defines the item.
//! - A `pub use` of a module's own child is a facade, not an edge; a private `use` of a child,
//!   a child's path in code, or a child using an item its parent defines, are edges.
//! - Layers: a module's submodules share its layer; `testing` is exempt; `lib.rs` is the root
//!   and has no layer. Only pairs of files are checked for cycles, not longer loops.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is_ident(&self, s: &str) -> bool {
        matches!(&self.tok, Tok::Ident(i) if i == s)
    }
    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }
    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(i) => Some(i),
            _ => None,
        }
    }
}

/// Identifiers, `::` and punctuation of `src`, without comments and literals.
fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Skips a quoted literal whose opening quote is at `i`, with escapes.
    let skip_quoted = |i: &mut usize, line: &mut usize, q: char| {
        *i += 1;
        while *i < c.len() && c[*i] != q {
            if c[*i] == '\\' {
                *i += 1;
            }
            if at(*i) == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            skip_quoted(&mut i, &mut line, '"');
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                skip_quoted(&mut i, &mut line, '\'');
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or a label.
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (at(i) == '"' || (at(i) == '#' && (at(i + 1) == '#' || at(i + 1) == '"'))) {
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1; // the opening quote
                loop {
                    if i >= c.len() {
                        break;
                    }
                    if c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                skip_quoted(&mut i, &mut line, '"');
            } else if word == "b" && at(i) == '\'' {
                skip_quoted(&mut i, &mut line, '\'');
            } else if word == "r" && at(i) == '#' {
                // A raw identifier: `r#type`.
                i += 1;
                let start = i;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
                let tok = Tok::Ident(c[start..i].iter().collect());
                out.push(Token { tok, line });
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else if ch.is_ascii_digit() {
            while at(i).is_alphanumeric()
                || at(i) == '_'
                || (at(i) == '.' && at(i + 1).is_ascii_digit())
            {
                i += 1;
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// Whether `t[i..]` starts with `#[cfg(test)]` or `#[cfg(loom)]` (`inner`: `#![..]`), and
/// where the attribute ends.
fn test_cfg_at(t: &[Token], i: usize, inner: bool) -> Option<usize> {
    let mut j = i;
    if !t.get(j)?.is_punct('#') {
        return None;
    }
    j += 1;
    if inner {
        if !t.get(j)?.is_punct('!') {
            return None;
        }
        j += 1;
    }
    let ok = t.get(j)?.is_punct('[')
        && t.get(j + 1)?.is_ident("cfg")
        && t.get(j + 2)?.is_punct('(')
        && (t.get(j + 3)?.is_ident("test") || t.get(j + 3)?.is_ident("loom"))
        && t.get(j + 4)?.is_punct(')')
        && t.get(j + 5)?.is_punct(']');
    ok.then_some(j + 6)
}

/// The end of the item (or field, or statement) starting at `i`: after its `;`, `,` or
/// closing brace at depth 0, or before a closing bracket of the enclosing block.
fn skip_item(t: &[Token], mut i: usize) -> usize {
    // Further attributes of the same item.
    while i < t.len() && t[i].is_punct('#') && t.get(i + 1).is_some_and(|n| n.is_punct('[')) {
        i = skip_group(t, i + 1);
    }
    let mut depth = 0i32;
    while i < t.len() {
        match t[i].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') if depth == 0 => return i,
            Tok::Punct('}') if depth == 0 => return i,
            Tok::Punct(')' | ']') => depth -= 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            Tok::Punct(';' | ',') if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index after the bracketed group opening at `i`.
fn skip_group(t: &[Token], mut i: usize) -> usize {
    let mut depth = 0;
    while i < t.len() {
        match t[i].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// One source file, read.
struct File {
    rel: String,
    module: Vec<String>,
    /// Tokens outside test-only items.
    tokens: Vec<Token>,
    /// Child modules it declares (`mod x;`), and those it declares for tests only.
    children: BTreeSet<String>,
    test_children: BTreeSet<String>,
    test_only: bool,
}

fn read_file(root: &Path, path: &Path) -> File {
    let rel = path
        .strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut module: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    let src = std::fs::read_to_string(path).unwrap();
    let all = lex(&src);
    let test_only = test_cfg_at(&all, 0, true).is_some();
    let (mut tokens, mut test_children) = (Vec::new(), BTreeSet::new());
    let mut i = 0;
    while i < all.len() {
        if let Some(after) = test_cfg_at(&all, i, false) {
            let end = skip_item(&all, after);
            let item = &all[after..end];
            if let Some(m) = item.iter().position(|t| t.is_ident("mod")) {
                if let (Some(name), Some(semi)) = (item.get(m + 1), item.get(m + 2)) {
                    if semi.is_punct(';') {
                        test_children.insert(name.ident().unwrap_or_default().to_string());
                    }
                }
            }
            i = end;
        } else {
            tokens.push(all[i].clone());
            i += 1;
        }
    }
    let children = tokens
        .windows(3)
        .filter(|w| w[0].is_ident("mod") && w[2].is_punct(';'))
        .filter_map(|w| w[1].ident().map(String::from))
        .collect();
    File {
        rel,
        module,
        tokens,
        children,
        test_children,
        test_only,
    }
}

/// A `use` tree flattened: each leaf's path, its `as` name, and whether the `use` is `pub`.
struct UseLeaf {
    path: Vec<String>,
    alias: Option<String>,
    public: bool,
    line: usize,
}

fn parse_use_tree(
    t: &[Token],
    i: &mut usize,
    prefix: Vec<String>,
    public: bool,
    out: &mut Vec<UseLeaf>,
) {
    let mut path = prefix;
    let line = t.get(*i).map_or(0, |t| t.line);
    while *i < t.len() {
        match &t[*i].tok {
            Tok::PathSep => *i += 1,
            Tok::Ident(s) => {
                path.push(s.clone());
                *i += 1;
                if t.get(*i).is_some_and(|n| n.tok == Tok::PathSep) {
                    continue;
                }
                let mut alias = None;
                if t.get(*i).is_some_and(|n| n.is_ident("as")) {
                    alias = t.get(*i + 1).and_then(|n| n.ident()).map(String::from);
                    *i += 2;
                }
                if path.last().map(String::as_str) == Some("self") {
                    path.pop();
                }
                out.push(UseLeaf {
                    path,
                    alias,
                    public,
                    line,
                });
                return;
            }
            Tok::Punct('*') => {
                *i += 1;
                out.push(UseLeaf {
                    path,
                    alias: None,
                    public,
                    line,
                });
                return;
            }
            Tok::Punct('{') => {
                *i += 1;
                while *i < t.len() && !t[*i].is_punct('}') {
                    parse_use_tree(t, i, path.clone(), public, out);
                    if t.get(*i).is_some_and(|n| n.is_punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => return,
        }
    }
}

/// A reference from one file: the path as written (made absolute: module segments from the
/// crate root) and its line.
struct Reference {
    path: Vec<String>,
    written: String,
    line: usize,
    /// A `pub use` of the file's own child: a facade, not an edge.
    facade: bool,
}

/// `path` as written in `file`, made absolute, or None for an external or local name.
fn absolute(file: &File, path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut abs = match first.as_str() {
        "crate" => path[1..].to_vec(),
        "self" => [file.module.as_slice(), &path[1..]].concat(),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = file.module.len().checked_sub(ups)?;
            [&file.module[..base], &path[ups..]].concat()
        }
        name if file.children.contains(name) || file.test_children.contains(name) => {
            [file.module.as_slice(), path].concat()
        }
        _ => return None,
    };
    if abs.last().map(String::as_str) == Some("self") {
        abs.pop();
    }
    Some(abs)
}

fn references(file: &File) -> (Vec<Reference>, Vec<(String, Vec<String>)>) {
    let t = &file.tokens;
    let (mut refs, mut reexports) = (Vec::new(), Vec::new());
    let mut in_use = vec![false; t.len()];
    let mut i = 0;
    while i < t.len() {
        if t[i].is_ident("use") {
            // `pub use` or `pub(..) use`.
            let public = i >= 1
                && (t[i - 1].is_ident("pub")
                    || (t[i - 1].is_punct(')')
                        && t[..i - 1]
                            .iter()
                            .rposition(|x| x.is_punct('('))
                            .is_some_and(|p| p >= 1 && t[p - 1].is_ident("pub"))));
            let start = i;
            i += 1;
            let mut leaves = Vec::new();
            parse_use_tree(t, &mut i, Vec::new(), public, &mut leaves);
            while i < t.len() && !t[i].is_punct(';') {
                i += 1;
            }
            in_use[start..i.min(t.len())]
                .iter_mut()
                .for_each(|b| *b = true);
            for leaf in leaves {
                let Some(abs) = absolute(file, &leaf.path) else {
                    continue;
                };
                let own_child = abs.len() > file.module.len()
                    && abs.starts_with(&file.module)
                    && file.children.contains(&abs[file.module.len()]);
                if leaf.public {
                    if let Some(name) = leaf.alias.clone().or_else(|| abs.last().cloned()) {
                        reexports.push((name, abs.clone()));
                    }
                }
                refs.push(Reference {
                    written: leaf.path.join("::"),
                    path: abs,
                    line: leaf.line,
                    facade: leaf.public && own_child,
                });
            }
        } else {
            i += 1;
        }
    }
    // Inline paths: a name followed by `::` that does not continue a path.
    let mut i = 0;
    while i + 1 < t.len() {
        let starts = !in_use[i]
            && t[i].ident().is_some()
            && t[i + 1].tok == Tok::PathSep
            && (i == 0 || t[i - 1].tok != Tok::PathSep);
        if !starts {
            i += 1;
            continue;
        }
        let mut path = vec![t[i].ident().unwrap().to_string()];
        let line = t[i].line;
        let mut j = i + 1;
        while j + 1 < t.len() && t[j].tok == Tok::PathSep {
            match t[j + 1].ident() {
                Some(s) => path.push(s.to_string()),
                None => break,
            }
            j += 2;
        }
        if let Some(abs) = absolute(file, &path) {
            refs.push(Reference {
                written: path.join("::"),
                path: abs,
                line,
                facade: false,
            });
        }
        i = j;
    }
    (refs, reexports)
}

struct Tree {
    files: Vec<File>,
    /// Module path -> index in `files`.
    modules: BTreeMap<Vec<String>, usize>,
    /// Per file: re-exported name -> absolute path it names.
    reexports: Vec<BTreeMap<String, Vec<String>>>,
}

impl Tree {
    /// The file that defines what `abs` names.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<usize> {
        let n = (0..=abs.len())
            .rev()
            .find(|&n| self.modules.contains_key(&abs[..n]))?;
        let file = self.modules[&abs[..n]];
        if n < abs.len() && depth < 8 {
            if let Some(target) = self.reexports[file].get(&abs[n]) {
                let target = [target.as_slice(), &abs[n + 1..]].concat();
                if target != abs {
                    return self.resolve(&target, depth + 1).or(Some(file));
                }
            }
        }
        Some(file)
    }
}

fn collect(files: &mut Vec<PathBuf>, dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(files, &path);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// lib.rs's layer table: module -> layer. Rows look like ``//! | 3 devices | `cuda`, `codec` |``.
fn layer_table(lib: &str) -> BTreeMap<String, u32> {
    let mut layers = BTreeMap::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').collect();
        let Some(layer) = cells[0]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        for name in cells.get(1).unwrap_or(&"").split('`').skip(1).step_by(2) {
            layers.insert(name.to_string(), layer);
        }
    }
    layers
}

#[test]
fn imports_run_down_the_layers_and_never_both_ways() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    collect(&mut paths, &root);
    paths.sort();
    let files: Vec<File> = paths.iter().map(|p| read_file(&root, p)).collect();

    // Test-only modules and everything under them.
    let mut test_modules: Vec<Vec<String>> = Vec::new();
    for f in &files {
        for c in &f.test_children {
            test_modules.push([f.module.as_slice(), std::slice::from_ref(c)].concat());
        }
        if f.test_only {
            test_modules.push(f.module.clone());
        }
    }
    let files: Vec<File> = files
        .into_iter()
        .filter(|f| !test_modules.iter().any(|m| f.module.starts_with(m)))
        .collect();

    let modules = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let parsed: Vec<_> = files.iter().map(references).collect();
    let tree = Tree {
        reexports: parsed
            .iter()
            .map(|(_, r)| r.iter().cloned().collect())
            .collect(),
        files,
        modules,
    };

    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let layers = layer_table(&lib);
    let lib_file = &tree.files[tree.modules[&Vec::new()]];
    let mut problems = Vec::new();
    for m in &lib_file.children {
        if m != "testing" && !layers.contains_key(m) {
            problems.push(format!(
                "module `{m}` is declared in lib.rs but has no row in lib.rs's layer table"
            ));
        }
    }
    for m in layers.keys() {
        if !lib_file.children.contains(m) {
            problems.push(format!(
                "lib.rs's layer table names `{m}`, which lib.rs does not declare"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Edges between files, with where each is written.
    let mut edges: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
    for (from, (refs, _)) in parsed.iter().enumerate() {
        let f = &tree.files[from];
        if f.module.is_empty() || f.module[0] == "testing" {
            continue;
        }
        for r in refs.iter().filter(|r| !r.facade) {
            let Some(to) = tree.resolve(&r.path, 0) else {
                continue;
            };
            let target = &tree.files[to].module;
            if to == from || target.is_empty() || target[0] == "testing" {
                continue;
            }
            edges
                .entry((from, to))
                .or_default()
                .push(format!("{}:{} `{}`", f.rel, r.line, r.written));
        }
    }

    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (&(from, to), wheres) in &edges {
        let (a, b) = (&tree.files[from], &tree.files[to]);
        let (la, lb) = (layers[&a.module[0]], layers[&b.module[0]]);
        if la < lb {
            found
                .entry(format!("upward: {} -> {}", a.rel, b.rel))
                .or_default()
                .push(format!(
                    "`{}` (layer {la}) imports `{}` (layer {lb}): {}",
                    a.module[0],
                    b.module[0],
                    wheres.join(", ")
                ));
        }
        if from < to {
            if let Some(back) = edges.get(&(to, from)) {
                found
                    .entry(format!("mutual: {} <-> {}", a.rel, b.rel))
                    .or_default()
                    .push(format!(
                        "{}; and back: {}",
                        wheres.join(", "),
                        back.join(", ")
                    ));
            }
        }
    }
    let report: Vec<String> = found
        .iter()
        .map(|(key, details)| format!("{key}\n    {}", details.join("\n    ")))
        .collect();
    assert!(
        report.is_empty(),
        "imports against the layer table of core/src/lib.rs, or both ways between two \
         files:\n{}",
        report.join("\n")
    );
}
