//! Stage 2: the key template, `"order:{order.id}:{user_id}"`.
//!
//! The template is parsed here and every placeholder is checked against the function's
//! parameters, so a typo is a compile error instead of a lock named after the wrong thing. What
//! is left for rustc (a missing field, a value that is not `Display`) is reported by rustc on
//! tokens that carry the literal's span, as thiserror does for its format strings.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{FnArg, LitStr, Pat, Path, Signature, Type};

use crate::diagnostics::{closest, Errors};

/// One piece of a parsed template.
#[derive(Debug, PartialEq)]
pub(crate) enum Piece {
    /// Text taken as it is (`{{` and `}}` already turned into single braces).
    Text(String),
    /// `{root.member.member}`.
    Value { root: String, members: Vec<String> },
}

/// A parsed key template together with the literal it came from.
pub(crate) struct Template {
    pub(crate) pieces: Vec<Piece>,
    pub(crate) lit: LitStr,
}

impl Template {
    /// Parses the template; every malformed placeholder is reported, not just the first.
    pub(crate) fn parse(lit: &LitStr) -> syn::Result<Template> {
        let pieces = parse_pieces(&lit.value()).map_err(|messages| {
            let mut errors = Errors::default();
            for m in messages {
                errors.push(syn::Error::new(lit.span(), m));
            }
            errors.finish().unwrap_err()
        })?;
        Ok(Template {
            pieces,
            lit: lit.clone(),
        })
    }

    /// Checks that every placeholder starts at a parameter of `sig`.
    pub(crate) fn check(&self, sig: &Signature) -> syn::Result<()> {
        let params = Params::of(sig);
        let mut errors = Errors::default();
        for piece in &self.pieces {
            let Piece::Value { root, members } = piece else {
                continue;
            };
            let shown = shown(root, members);
            if root == "self" {
                if !params.has_self {
                    errors.push(syn::Error::new(
                        self.lit.span(),
                        format!(
                            "`{shown}` in the key uses `self`, but `fn {}` has no `self` \
                             parameter; use one of its parameters instead{}",
                            sig.ident,
                            params.listing()
                        ),
                    ));
                }
            } else if !params.names.contains(root) {
                let mut msg = format!(
                    "`{shown}` in the key: `fn {}` has no parameter `{root}`{}",
                    sig.ident,
                    params.listing()
                );
                let candidates = params.names.iter().map(String::as_str);
                if let Some(best) = closest(root, candidates) {
                    msg.push_str(&format!("; did you mean `{best}`?"));
                }
                errors.push(syn::Error::new(self.lit.span(), msg));
            } else if members.is_empty() && params.optional.contains(root) {
                // rustc would say "`Option<..>` doesn't implement `Display`" and suggest
                // `{:?}`, which keys reject; say what a key needs instead.
                errors.push(syn::Error::new(
                    self.lit.span(),
                    format!(
                        "`{shown}` in the key: `{root}` is an `Option`, and a lock name needs a \
                         value. Decide what `None` means before taking the lock (return early, \
                         or lock on another key) and pass the value itself, e.g. a separate \
                         parameter of type `T` instead of `Option<T>`"
                    ),
                ));
            }
        }
        errors.finish()
    }

    /// `::std::format!("order:{}", #krate::KeyPart(&format_args!("{}", order.id)))`, every token spanned at the
    /// literal: a field that does not exist or a value that is not `Display` is then reported by
    /// rustc on the key, the only place the user wrote it.
    pub(crate) fn render(&self, krate: &Path) -> TokenStream {
        let span = self.lit.span();
        // Even the facade path: one token spanned elsewhere would stretch the span rustc
        // reports for the whole `format!` call from the literal to the attribute.
        let krate = respan(quote!(#krate), span);
        let mut format = String::new();
        let mut values = Vec::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Value { root, members } => {
                    format.push_str("{}");
                    let root = ident(root, span);
                    // Fields get the literal's location but the call site's expansion
                    // context: rustc then still reports a missing field on the key, but offers
                    // no "similar field" fix, which would replace the whole literal with the
                    // field's name (`key = id`), the only place it can point at.
                    let field_span = Span::call_site().located_at(span);
                    let members = members.iter().map(|m| member(m, field_span));
                    // The value is formatted by `format_args!` before `KeyPart` escapes it, so a
                    // value that is not `Display` is reported as exactly that, on the key,
                    // without rustc pointing at `KeyPart`'s impl, which the user never wrote.
                    values.push(quote_spanned! {span=>
                        #krate::KeyPart(&::std::format_args!("{}", #root #(.#members)*))
                    });
                }
            }
        }
        if values.is_empty() {
            // No placeholders: a plain string, so clippy's `useless_format` has nothing to say.
            let text = LitStr::new(&format.replace("{{", "{").replace("}}", "}"), span);
            return quote!(::std::string::String::from(#text));
        }
        let format = LitStr::new(&format, span);
        // The macro call carries the literal's span too, so the errors rustc raises inside
        // `format_args!` (a value that is not `Display`) land on the key, not the attribute.
        quote_spanned!(span=> ::std::format!(#format #(, #values)*))
    }
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                let mut inner = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                inner.set_span(span);
                tt = inner.into();
            }
            tt.set_span(span);
            tt
        })
        .collect()
}

fn shown(root: &str, members: &[String]) -> String {
    let mut s = format!("{{{root}");
    for m in members {
        s.push('.');
        s.push_str(m);
    }
    s.push('}');
    s
}

fn ident(name: &str, span: Span) -> syn::Ident {
    match name.strip_prefix("r#") {
        Some(raw) => syn::Ident::new_raw(raw, span),
        None => syn::Ident::new(name, span),
    }
}

fn member(name: &str, span: Span) -> syn::Member {
    match name.parse::<u32>() {
        Ok(index) => syn::Member::Unnamed(syn::Index { index, span }),
        Err(_) => syn::Member::Named(ident(name, span)),
    }
}

/// Splits a template into text and placeholders; on failure returns one message per mistake.
pub(crate) fn parse_pieces(template: &str) -> Result<Vec<Piece>, Vec<String>> {
    if template.is_empty() {
        return Err(vec![
            "the key is empty; write a template such as `key = \"order:{order.id}\"`, or leave \
             `key` out to lock on the function's module path and name"
                .to_owned(),
        ]);
    }
    let mut pieces = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        text.push_str(&rest[..at]);
        let brace = &rest[at..at + 1];
        let after = &rest[at + 1..];
        if after.starts_with(brace) {
            text.push_str(brace);
            rest = &after[1..];
            continue;
        }
        if brace == "}" {
            errors.push(format!(
                "unmatched `}}` in the key {template:?}; write `}}}}` for a literal `}}`"
            ));
            rest = after;
            continue;
        }
        let Some(close) = after
            .find(['{', '}'])
            .filter(|&i| after[i..].starts_with('}'))
        else {
            errors.push(format!(
                "unclosed `{{` in the key {template:?}; close the placeholder with `}}`, or \
                 write `{{{{` for a literal `{{`"
            ));
            break;
        };
        let inside = &after[..close];
        match placeholder(inside) {
            Ok((root, members)) => {
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Value { root, members });
            }
            Err(why) => errors.push(why),
        }
        rest = &after[close + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    if errors.is_empty() {
        Ok(pieces)
    } else {
        Err(errors)
    }
}

/// `order.id` -> (`order`, [`id`]). Only a parameter followed by fields: a key is a name, not
/// code, and anything more (calls, format specs) belongs in a parameter or a `Display` impl.
fn placeholder(inside: &str) -> Result<(String, Vec<String>), String> {
    if inside.is_empty() {
        return Err(
            "empty placeholder `{}` in the key; name a parameter, e.g. `{id}`, or \
                    write `{{}}` for literal braces"
                .to_owned(),
        );
    }
    if inside.contains(':') {
        return Err(format!(
            "`{{{inside}}}`: format specs are not supported in keys; values are rendered with \
             `Display` (write a `Display` impl or pass a pre-formatted parameter instead)"
        ));
    }
    let mut segments = inside.split('.');
    let root = segments.next().unwrap_or_default();
    if !is_ident(root) {
        return Err(format!(
            "`{{{inside}}}` in the key: a placeholder starts with a parameter name, e.g. `{{id}}`, \
             `{{order.id}}` or `{{self.id}}`"
        ));
    }
    let members: Vec<String> = segments.map(str::to_owned).collect();
    if let Some(bad) = members
        .iter()
        .find(|m| !is_ident(m) && m.parse::<u32>().is_err())
    {
        return Err(format!(
            "`{{{inside}}}` in the key: `{bad}` is not a field name; placeholders take fields \
             only, e.g. `{{order.id}}` or `{{pair.0}}` (no calls, spaces or indexing)"
        ));
    }
    Ok((root.to_owned(), members))
}

fn is_ident(s: &str) -> bool {
    let s = s.strip_prefix("r#").unwrap_or(s);
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        && s != "_"
}

/// The names a key may start with: every binding in the parameter patterns, plus `self`.
struct Params {
    names: Vec<String>,
    has_self: bool,
    /// Parameters declared as `name: Option<..>` (or a reference to one).
    optional: Vec<String>,
}

impl Params {
    fn of(sig: &Signature) -> Params {
        let mut params = Params {
            names: Vec::new(),
            has_self: false,
            optional: Vec::new(),
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => params.has_self = true,
                FnArg::Typed(typed) => {
                    bindings(&typed.pat, &mut params.names);
                    if let (Pat::Ident(p), true) = (&*typed.pat, is_option(&typed.ty)) {
                        params.optional.push(p.ident.to_string());
                    }
                }
            }
        }
        params
    }

    fn listing(&self) -> String {
        let mut all: Vec<String> = self.names.iter().map(|n| format!("`{n}`")).collect();
        if self.has_self {
            all.insert(0, "`self`".to_owned());
        }
        if all.is_empty() {
            " (it has no parameters)".to_owned()
        } else {
            format!(" (its parameters: {})", all.join(", "))
        }
    }
}

/// `Option<T>`, `&Option<T>`, `std::option::Option<T>`: syntactically, as a macro must (an
/// alias of `Option` is left to rustc).
fn is_option(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => is_option(&r.elem),
        Type::Paren(p) => is_option(&p.elem),
        Type::Group(g) => is_option(&g.elem),
        Type::Path(p) => {
            p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Option")
        }
        _ => false,
    }
}

/// Every identifier a pattern binds: `(a, b)`, `Point { x, .. }`, `mut n`, `x @ 1..`.
fn bindings(pat: &Pat, out: &mut Vec<String>) {
    match pat {
        Pat::Ident(p) => {
            out.push(p.ident.to_string());
            if let Some((_, sub)) = &p.subpat {
                bindings(sub, out);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|p| bindings(p, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| bindings(&f.pat, out)),
        Pat::Slice(p) => p.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Reference(p) => bindings(&p.pat, out),
        Pat::Paren(p) => bindings(&p.pat, out),
        Pat::Type(p) => bindings(&p.pat, out),
        // Every alternative binds the same names.
        Pat::Or(p) => p.cases.iter().take(1).for_each(|p| bindings(p, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(root: &str, members: &[&str]) -> Piece {
        Piece::Value {
            root: root.to_owned(),
            members: members.iter().map(|m| m.to_string()).collect(),
        }
    }

    fn text(s: &str) -> Piece {
        Piece::Text(s.to_owned())
    }

    #[test]
    fn templates() {
        assert_eq!(
            parse_pieces("order:{order.id}:{user_id}").unwrap(),
            vec![
                text("order:"),
                value("order", &["id"]),
                text(":"),
                value("user_id", &[]),
            ]
        );
        assert_eq!(parse_pieces("{{a}}").unwrap(), vec![text("{a}")]);
        assert_eq!(
            parse_pieces("{self.inner.0}x").unwrap(),
            vec![value("self", &["inner", "0"]), text("x")]
        );
        assert_eq!(
            parse_pieces("{{{a}}}").unwrap(),
            vec![text("{"), value("a", &[]), text("}")]
        );
        assert_eq!(
            parse_pieces("{r#type}").unwrap(),
            vec![value("r#type", &[])]
        );
    }

    #[test]
    fn malformed_templates() {
        let one = |t: &str| parse_pieces(t).unwrap_err().join(" | ");
        assert!(one("").contains("the key is empty"));
        assert!(one("a{b").contains("unclosed `{`"));
        assert!(one("a{b{c}").contains("unclosed `{`"));
        assert!(one("a}b").contains("unmatched `}`"));
        assert!(one("a{}").contains("empty placeholder"));
        assert!(one("{id:?}").contains("format specs are not supported"));
        assert!(one("{ id }").contains("starts with a parameter name"));
        assert!(one("{0}").contains("starts with a parameter name"));
        assert!(one("{a.b()}").contains("`b()` is not a field name"));
        assert!(one("{a..b}").contains("is not a field name"));
        assert_eq!(parse_pieces("}{x").unwrap_err().len(), 2);
    }

    fn check(sig: &str, key: &str) -> String {
        let sig: Signature = syn::parse_str(sig).unwrap();
        let lit = LitStr::new(key, Span::call_site());
        match Template::parse(&lit).and_then(|t| t.check(&sig)) {
            Ok(()) => String::new(),
            Err(e) => e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }

    #[test]
    fn placeholders_must_name_parameters() {
        let sig = "async fn pay(order: &Order, (a, b): (u8, u8), mut n: u32, Point { x, .. }: P)";
        assert_eq!(check(sig, "{order.id}:{a}:{b}:{n}:{x}"), "");
        let e = check(sig, "{ordr.id}");
        assert!(e.contains("`fn pay` has no parameter `ordr`"), "{e}");
        assert!(e.contains("did you mean `order`?"), "{e}");
        assert!(e.contains("`order`, `a`, `b`, `n`, `x`"), "{e}");
        let e = check(sig, "{self.id}");
        assert!(e.contains("has no `self` parameter"), "{e}");
        assert_eq!(check("async fn m(&self, id: u8)", "{self.id}:{id}"), "");
        let e = check("async fn m(id: Option<u8>, o: &Option<O>)", "{id}");
        assert!(e.contains("`id` is an `Option`"), "{e}");
        assert!(check("async fn m(o: &Option<O>)", "{o}").contains("is an `Option`"));
        assert_eq!(check("async fn m(o: &Option<O>)", "{o.0}"), "");
        let e = check("async fn m()", "{zzz}");
        assert!(e.contains("it has no parameters"), "{e}");
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn rendering() {
        let krate: Path = syn::parse_str("::dlock").unwrap();
        let render = |key: &str| {
            let lit = LitStr::new(key, Span::call_site());
            Template::parse(&lit).unwrap().render(&krate).to_string()
        };
        assert_eq!(
            render("o:{order.id}:{{x}}:{p.0}"),
            ":: std :: format ! (\"o:{}:{{x}}:{}\" , :: dlock :: KeyPart (& :: std :: format_args ! (\"{}\" , order . id)) , \
             :: dlock :: KeyPart (& :: std :: format_args ! (\"{}\" , p . 0)))"
        );
        assert_eq!(
            render("plain:{{x}}"),
            ":: std :: string :: String :: from (\"plain:{x}\")"
        );
    }
}
