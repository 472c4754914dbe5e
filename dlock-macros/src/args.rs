//! Stage 1: the attribute's arguments, `key = "...", ttl = "30s", client = self.locks, ...`.
//!
//! Every option keeps the span of its value so later stages (and rustc) can point at the exact
//! token. Parsing does not stop at the first mistake that leaves the input readable (unknown,
//! repeated or malformed option): all of them are reported together, so a user fixing one typo
//! does not discover the next one only after recompiling.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream};
use syn::{Expr, LitStr, Path, Token};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(client);
}

/// The option names, in the order the error message lists them.
pub(crate) const OPTIONS: &[&str] = &["key", "ttl", "wait", "lease", "client", "crate"];

/// A duration option, already converted to milliseconds at compile time.
pub(crate) struct DurationArg {
    pub(crate) millis: u64,
    /// The string literal it came from.
    pub(crate) span: Span,
    /// Position among the options, to tell which of two conflicting options came second.
    index: usize,
}

/// The parsed attribute. `None` means "not given": the runtime's defaults apply.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<LitStr>,
    pub(crate) ttl: Option<DurationArg>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) lease: Option<DurationArg>,
    pub(crate) client: Option<Expr>,
    /// `crate = "..."`: the path the generated code uses instead of `::dlock`.
    pub(crate) krate: Option<Path>,
    /// Mistakes that left the rest readable (unknown, repeated or invalid options). Kept apart
    /// from a parse failure so the key is still checked against the function.
    pub(crate) problems: Errors,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors = std::mem::take(&mut args.problems);
        let mut index = 0;
        while !input.is_empty() {
            index += 1;
            let name_span = input.span();
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::key) {
                input.parse::<kw::key>()?;
                let lit = value(input, "key", name_span, |i| {
                    lit_str(i, "key", "\"order:{id}\"")
                })?;
                set(&mut args.key, lit, "key", name_span, &mut errors);
            } else if lookahead.peek(kw::ttl) {
                input.parse::<kw::ttl>()?;
                duration_option(input, "ttl", (name_span, index), &mut args.ttl, &mut errors)?;
            } else if lookahead.peek(kw::wait) {
                input.parse::<kw::wait>()?;
                duration_option(
                    input,
                    "wait",
                    (name_span, index),
                    &mut args.wait,
                    &mut errors,
                )?;
            } else if lookahead.peek(kw::lease) {
                input.parse::<kw::lease>()?;
                duration_option(
                    input,
                    "lease",
                    (name_span, index),
                    &mut args.lease,
                    &mut errors,
                )?;
            } else if lookahead.peek(kw::client) {
                input.parse::<kw::client>()?;
                let expr = value(input, "client", name_span, |i| i.parse::<Expr>())?;
                set(&mut args.client, expr, "client", name_span, &mut errors);
            } else if lookahead.peek(Token![crate]) {
                input.parse::<Token![crate]>()?;
                let lit = value(input, "crate", name_span, |i| {
                    lit_str(i, "crate", "\"::dlock\"")
                })?;
                match lit.parse::<Path>() {
                    Ok(path) => set(&mut args.krate, path, "crate", name_span, &mut errors),
                    Err(_) => errors.push(syn::Error::new(
                        lit.span(),
                        format!(
                            "`crate = {:?}` is not a path; write the path dlock is reachable \
                             under, e.g. `crate = \"::dlock\"` or `crate = \"my_deps::dlock\"`",
                            lit.value()
                        ),
                    )),
                }
            } else if input.peek(syn::Ident) || input.peek(syn::Lifetime) {
                errors.push(unknown_option(input)?);
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            if !input.peek(Token![,]) {
                return Err(syn::Error::new(
                    input.span(),
                    "expected `,` between options, e.g. `key = \"order:{id}\", wait = \"5s\"`",
                ));
            }
            input.parse::<Token![,]>()?;
        }
        if let (Some(ttl), Some(lease)) = (&args.ttl, &args.lease) {
            // Point at whichever came second: that is the one the user just added.
            let span = if ttl.index > lease.index {
                ttl.span
            } else {
                lease.span
            };
            errors.push(syn::Error::new(
                span,
                "`lease` and `ttl` cannot be used together: `ttl` is a lease the watchdog keeps \
                 renewing while the body runs, `lease` is a hard lease with no watchdog; keep one",
            ));
        }
        args.problems = errors;
        Ok(args)
    }
}

/// Several errors reported as one `syn::Error`.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, err: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(err),
            None => self.0 = Some(err),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

fn set<T>(slot: &mut Option<T>, value: T, name: &str, span: Span, errors: &mut Errors) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            span,
            format!("`{name}` is given twice; keep one"),
        ));
    } else {
        *slot = Some(value);
    }
}

/// Parses `= <value>` after an option name, with errors that say what was expected.
fn value<T>(
    input: ParseStream,
    name: &str,
    name_span: Span,
    parse: impl FnOnce(ParseStream) -> syn::Result<T>,
) -> syn::Result<T> {
    if !input.peek(Token![=]) {
        let span = if input.is_empty() {
            name_span
        } else {
            input.span()
        };
        return Err(syn::Error::new(
            span,
            format!("expected `=` after `{name}`, e.g. {}", example(name)),
        ));
    }
    let eq: Token![=] = input.parse()?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(syn::Error::new(
            eq.span,
            format!("`{name} =` has no value, e.g. {}", example(name)),
        ));
    }
    parse(input)
}

fn example(name: &str) -> &'static str {
    match name {
        "key" => "`key = \"order:{order.id}\"`",
        "ttl" => "`ttl = \"30s\"`",
        "wait" => "`wait = \"5s\"`",
        "lease" => "`lease = \"10s\"`",
        "client" => "`client = self.locks`",
        _ => "`crate = \"::dlock\"`",
    }
}

fn lit_str(input: ParseStream, name: &str, example: &str) -> syn::Result<LitStr> {
    if input.peek(LitStr) {
        return input.parse();
    }
    let tt: TokenTree = input.parse()?;
    Err(syn::Error::new(
        tt.span(),
        format!("`{name}` takes a string literal, e.g. `{name} = {example}`"),
    ))
}

fn duration_option(
    input: ParseStream,
    name: &str,
    (name_span, index): (Span, usize),
    slot: &mut Option<DurationArg>,
    errors: &mut Errors,
) -> syn::Result<()> {
    let lit = value(input, name, name_span, |i| lit_str(i, name, "\"30s\""))?;
    match parse_duration(&lit.value()) {
        Ok(0) if name != "wait" => errors.push(syn::Error::new(
            lit.span(),
            format!("`{name}` must be longer than zero: a lock whose lease is zero is never held"),
        )),
        Ok(millis) => set(
            slot,
            DurationArg {
                millis,
                span: lit.span(),
                index,
            },
            name,
            name_span,
            errors,
        ),
        Err(why) => errors.push(syn::Error::new(
            lit.span(),
            format!("invalid `{name}` {:?}: {why}", lit.value()),
        )),
    }
    Ok(())
}

/// `"250ms"`, `"30s"`, `"2m"`, `"1h"` -> milliseconds. Nothing else: one number and one unit
/// keeps the syntax obvious, and the value is checked here rather than at run time.
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    const HINT: &str = "write a whole number and a unit, e.g. \"250ms\", \"30s\", \"2m\" or \"1h\"";
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return Err(HINT.to_owned());
    }
    let scale: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("the unit is missing; {HINT}")),
        other if other.starts_with('.') => {
            return Err(format!(
                "fractions are not supported; use a smaller unit ({HINT})"
            ))
        }
        other if other.starts_with(' ') => {
            return Err(format!("no space between the number and the unit; {HINT}"))
        }
        other => return Err(format!("unknown unit `{other}`; {HINT}")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| "the duration is too long to count in milliseconds".to_owned())
}

/// An option we do not know: report it with the valid names (and the closest one), then skip
/// its `= value` so the options after it are still checked.
fn unknown_option(input: ParseStream) -> syn::Result<syn::Error> {
    let name = input.call(<syn::Ident as syn::ext::IdentExt>::parse_any)?;
    let text = name.to_string();
    let valid = OPTIONS
        .iter()
        .map(|o| format!("`{o}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut msg = format!("unknown option `{text}`; the options are {valid}");
    if let Some(best) = crate::key::closest(&text, OPTIONS.iter().copied()) {
        msg.push_str(&format!("; did you mean `{best}`?"));
    }
    // Skip `= value` up to the next top-level comma.
    let _skipped: TokenStream = input.step(|cursor| {
        let mut rest = *cursor;
        let mut out = TokenStream::new();
        while let Some((tt, next)) = rest.token_tree() {
            if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ',') {
                break;
            }
            out.extend([tt]);
            rest = next;
        }
        Ok((out, rest))
    })?;
    Ok(syn::Error::new(name.span(), msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> syn::Result<Args> {
        let mut args = syn::parse_str::<Args>(src)?;
        std::mem::take(&mut args.problems).finish()?;
        Ok(args)
    }

    fn err(src: &str) -> String {
        match parse(src) {
            Ok(_) => panic!("`{src}` parsed"),
            Err(e) => e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("2m"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("0s"), Ok(0));
        for bad in [
            "",
            "s",
            "30",
            "1.5s",
            "30 s",
            "-1s",
            "30sec",
            "1d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn all_options() {
        let a = parse(
            r#"key = "order:{id}", ttl = "30s", wait = "0s", client = self.locks, crate = "::x::dlock","#,
        )
        .unwrap();
        assert_eq!(a.key.unwrap().value(), "order:{id}");
        assert_eq!(a.ttl.unwrap().millis, 30_000);
        assert_eq!(a.wait.unwrap().millis, 0);
        assert!(a.lease.is_none());
        assert!(a.client.is_some());
        let krate = a.krate.unwrap();
        assert_eq!(quote::quote!(#krate).to_string(), ":: x :: dlock");
        assert!(parse("").unwrap().key.is_none());
        assert_eq!(
            parse(r#"lease = "2m""#).unwrap().lease.unwrap().millis,
            120_000
        );
    }

    #[test]
    fn mistakes_are_all_reported() {
        let e = err(r#"ky = "a", ttl = "5x", wait = "1s", wait = "2s""#);
        assert!(e.contains("unknown option `ky`"), "{e}");
        assert!(e.contains("did you mean `key`"), "{e}");
        assert!(
            e.contains("`key`, `ttl`, `wait`, `lease`, `client`, `crate`"),
            "{e}"
        );
        assert!(e.contains("unknown unit `x`"), "{e}");
        assert!(e.contains("`wait` is given twice"), "{e}");
    }

    #[test]
    fn syntax_mistakes() {
        assert!(err(r#"key "a""#).contains("expected `=` after `key`"));
        assert!(err("key").contains("expected `=` after `key`"));
        assert!(err("key =").contains("`key =` has no value"));
        assert!(err("key = , ttl = \"1s\"").contains("`key =` has no value"));
        assert!(err("key = 5").contains("`key` takes a string literal"));
        assert!(err(r#"ttl = "0s""#).contains("must be longer than zero"));
        assert!(err(r#"ttl = "1s", lease = "1s""#).contains("cannot be used together"));
        assert!(err(r#"key = "a" ttl = "1s""#).contains("expected `,`"));
        assert!(err(r#"crate = "not a path""#).contains("is not a path"));
    }
}
