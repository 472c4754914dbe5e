//! Stage 1: the attribute's arguments, `key = "...", ttl = "30s", client = self.locks, ...`.
//!
//! Every option keeps the span of its value so later stages (and rustc) can point at the exact
//! token. Parsing does not stop at the first mistake that leaves the input readable (unknown,
//! repeated or malformed option): all of them are reported together, so a user fixing one typo
//! does not discover the next one only after recompiling.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream};
use syn::{Expr, LitStr, Path, Token};

use crate::diagnostics::{closest, Errors};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(client);
    syn::custom_keyword!(on_busy);
    syn::custom_keyword!(map_err);
    syn::custom_keyword!(kind);
    syn::custom_keyword!(keys);
    syn::custom_keyword!(permits);
}

/// Which attribute the options belong to: they share the parser, not every option.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attr {
    /// `#[distributed_lock]`.
    Lock,
    /// `#[distributed_semaphore]`.
    Semaphore,
}

impl Attr {
    /// `#[distributed_lock]`, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Attr::Lock => "#[distributed_lock]",
            Attr::Semaphore => "#[distributed_semaphore]",
        }
    }

    /// The option names, in the order the error message lists them.
    pub(crate) fn options(self) -> &'static [&'static str] {
        match self {
            Attr::Lock => &[
                "key", "keys", "kind", "ttl", "wait", "lease", "client", "on_busy", "map_err",
                "crate",
            ],
            Attr::Semaphore => &[
                "key", "permits", "ttl", "wait", "lease", "client", "on_busy", "map_err", "crate",
            ],
        }
    }
}

/// `kind = "..."` of `#[distributed_lock]`: which lock of the family the function takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// `client.lock(key)`: the default.
    Reentrant,
    /// `client.read_write_lock(key).read()`.
    Read,
    /// `client.read_write_lock(key).write()`.
    Write,
    /// `client.fair_lock(key)`.
    Fair,
    /// `client.redisson_lock(key)`: Redisson's `RLock` on the wire.
    Redisson,
    /// `client.redisson_fenced_lock(key)`: Redisson's `RFencedLock`.
    RedissonFenced,
    /// `client.redisson_read_write_lock(key).read()`.
    RedissonRead,
    /// `client.redisson_read_write_lock(key).write()`.
    RedissonWrite,
}

const KINDS: &str = "`kind = \"reentrant\"` (the plain lock, the default), `kind = \"read\"` and \
                     `kind = \"write\"` (the shared and the exclusive side of a read-write lock), \
                     `kind = \"fair\"` (first come, first served), `kind = \"redisson\"`, \
                     `\"redisson_fenced\"`, `\"redisson_read\"` and `\"redisson_write\"` \
                     (Redisson's own locks, shared with Java services)";

/// Every `kind = "..."` value, for "did you mean".
const KIND_NAMES: [&str; 8] = [
    "reentrant",
    "read",
    "write",
    "fair",
    "redisson",
    "redisson_fenced",
    "redisson_read",
    "redisson_write",
];

/// What the function returns when the lock stays held by another owner for the whole `wait`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBusy {
    /// `Err(LockError::Timeout)`, converted: the default.
    Error,
    /// `Ok(None)`: "another node is doing it", for `Result<Option<T>, E>` functions.
    Skip,
}

/// A duration option, already converted to milliseconds at compile time.
pub(crate) struct DurationArg {
    /// [`FOREVER`] for `wait = "forever"`.
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
    /// `on_busy = "skip"`, with the literal's span for the return-type check.
    pub(crate) on_busy: Option<(OnBusy, Span)>,
    /// `map_err = path::to::fn`: converts the `LockError` instead of `From`.
    pub(crate) map_err: Option<Expr>,
    /// `crate = "..."`: the path the generated code uses instead of `::dlock`.
    pub(crate) krate: Option<Path>,
    /// `kind = "read"`, with the literal's span.
    pub(crate) kind: Option<(Kind, Span)>,
    /// `keys = ["a:{x}", "b:{y}"]`: a multi-lock over the rendered keys.
    pub(crate) keys: Option<Vec<LitStr>>,
    /// `permits = 3` of `#[distributed_semaphore]`.
    pub(crate) permits: Option<u32>,
    /// Mistakes that left the rest readable (unknown, repeated or invalid options). Kept apart
    /// from a parse failure so the key is still checked against the function.
    pub(crate) problems: Errors,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Args::parse_for(input, Attr::Lock)
    }
}

impl Args {
    /// Parses the options of `attr`; every attribute shares this parser, and the options of
    /// one attribute given to the other are reported with the attribute that takes them.
    pub(crate) fn parse_for(input: ParseStream, attr: Attr) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut errors = std::mem::take(&mut args.problems);
        let mut index = 0;
        // Where `key`, `keys`, `kind` and `permits` were written, for the checks at the end.
        let mut key_at: Option<(usize, Span)> = None;
        let mut keys_at: Option<(usize, Span)> = None;
        let mut kind_name: Option<Span> = None;
        let mut permits_name: Option<Span> = None;
        while !input.is_empty() {
            index += 1;
            let name_span = input.span();
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::key) {
                input.parse::<kw::key>()?;
                let lit = value(input, "key", name_span, |i| {
                    lit_str(i, "key", "\"order:{id}\"")
                })?;
                key_at.get_or_insert((index, name_span));
                set(&mut args.key, lit, "key", name_span, &mut errors);
            } else if lookahead.peek(kw::keys) {
                input.parse::<kw::keys>()?;
                let (lits, brackets) = value(input, "keys", name_span, key_list)?;
                if lits.is_empty() {
                    errors.push(syn::Error::new(
                        brackets,
                        "`keys = []` is empty: list the key templates of the locks to take \
                         together, e.g. `keys = [\"acct:{from}\", \"acct:{to}\"]` (or write \
                         `key = \"...\"` for one lock)",
                    ));
                } else {
                    keys_at.get_or_insert((index, name_span));
                    set(&mut args.keys, lits, "keys", name_span, &mut errors);
                }
            } else if lookahead.peek(kw::kind) {
                input.parse::<kw::kind>()?;
                let lit = value(input, "kind", name_span, |i| lit_str(i, "kind", "\"read\""))?;
                kind_name.get_or_insert(name_span);
                let kind = match lit.value().as_str() {
                    "reentrant" => Some(Kind::Reentrant),
                    "read" => Some(Kind::Read),
                    "write" => Some(Kind::Write),
                    "fair" => Some(Kind::Fair),
                    "redisson" => Some(Kind::Redisson),
                    "redisson_fenced" => Some(Kind::RedissonFenced),
                    "redisson_read" => Some(Kind::RedissonRead),
                    "redisson_write" => Some(Kind::RedissonWrite),
                    other => {
                        let mut msg = format!("unknown kind `{other}`; the kinds are {KINDS}");
                        if matches!(other, "exclusive" | "plain" | "mutex" | "lock") {
                            msg.push_str(
                                "; an exclusive lock is the default: leave `kind` out (or write \
                                 `kind = \"write\"` to exclude the readers of a read-write lock)",
                            );
                        } else if let Some(best) = closest(other, KIND_NAMES.into_iter()) {
                            msg.push_str(&format!("; did you mean `kind = \"{best}\"`?"));
                        }
                        errors.push(syn::Error::new(lit.span(), msg));
                        None
                    }
                };
                if let Some(kind) = kind {
                    set(
                        &mut args.kind,
                        (kind, lit.span()),
                        "kind",
                        name_span,
                        &mut errors,
                    );
                }
            } else if lookahead.peek(kw::permits) {
                input.parse::<kw::permits>()?;
                let lit = value(input, "permits", name_span, |i| i.parse::<Expr>())?;
                permits_name.get_or_insert(name_span);
                match permits_value(&lit) {
                    Ok(n) => set(&mut args.permits, n, "permits", name_span, &mut errors),
                    Err(e) => errors.push(e),
                }
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
            } else if lookahead.peek(kw::on_busy) {
                input.parse::<kw::on_busy>()?;
                let lit = value(input, "on_busy", name_span, |i| {
                    lit_str(i, "on_busy", "\"skip\"")
                })?;
                let mode = match lit.value().as_str() {
                    "skip" => Some(OnBusy::Skip),
                    "error" => Some(OnBusy::Error),
                    other => {
                        errors.push(syn::Error::new(
                            lit.span(),
                            format!(
                                "`on_busy = {other:?}`: write `on_busy = \"skip\"` (return \
                                 `Ok(None)` when the lock stays busy) or `on_busy = \"error\"` \
                                 (return the timeout as an error, the default)"
                            ),
                        ));
                        None
                    }
                };
                if let Some(mode) = mode {
                    set(
                        &mut args.on_busy,
                        (mode, lit.span()),
                        "on_busy",
                        name_span,
                        &mut errors,
                    );
                }
            } else if lookahead.peek(kw::map_err) {
                input.parse::<kw::map_err>()?;
                let expr = value(input, "map_err", name_span, |i| i.parse::<Expr>())?;
                set(&mut args.map_err, expr, "map_err", name_span, &mut errors);
            } else if input.peek(LitStr) {
                // `#[distributed_lock("order:{id}")]`: clearly a key; say how to write it.
                let lit: LitStr = input.parse()?;
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "options are named: write `key = {:?}` (the options are {})",
                        lit.value(),
                        listing(attr)
                    ),
                ));
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
                errors.push(unknown_option(input, attr)?);
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
        match attr {
            Attr::Lock => {
                if let Some(span) = permits_name {
                    errors.push(syn::Error::new(
                        span,
                        "`permits` is an option of #[distributed_semaphore]: a lock has one \
                         holder; for N holders at once write \
                         `#[distributed_semaphore(key = \"...\", permits = N)]`",
                    ));
                }
                if let (Some(key), Some(keys)) = (key_at, keys_at) {
                    // At whichever came second.
                    let span = if key.0 > keys.0 { key.1 } else { keys.1 };
                    errors.push(syn::Error::new(
                        span,
                        "`key` and `keys` cannot be used together: `key = \"...\"` names one \
                         lock, `keys = [...]` takes several locks all or none; keep one (list \
                         every key in `keys`)",
                    ));
                }
                if let (Some(_), Some((kind, span))) = (&args.keys, args.kind) {
                    if kind != Kind::Reentrant {
                        errors.push(syn::Error::new(
                            span,
                            format!(
                                "`keys = [...]` takes plain (reentrant) locks and cannot be \
                                 combined with `kind = \"{}\"`; leave `kind` out, or lock a \
                                 single `key` of that kind",
                                kind_text(kind)
                            ),
                        ));
                    }
                }
            }
            Attr::Semaphore => {
                for (span, name) in [(kind_name, "kind"), (keys_at.map(|k| k.1), "keys")] {
                    if let Some(span) = span {
                        errors.push(syn::Error::new(
                            span,
                            format!(
                                "`{name}` is an option of #[distributed_lock], not of \
                                 #[distributed_semaphore]; the options are {}",
                                listing(attr)
                            ),
                        ));
                    }
                }
                if args.permits.is_none() && permits_name.is_none() {
                    errors.push(syn::Error::new(
                        Span::call_site(),
                        "#[distributed_semaphore] needs `permits = N`, how many holders may run \
                         the body at once, e.g. \
                         `#[distributed_semaphore(key = \"exports\", permits = 3)]`",
                    ));
                }
            }
        }
        args.problems = errors;
        Ok(args)
    }
}

/// `"read"` for `Kind::Read`, for messages.
pub(crate) fn kind_text(kind: Kind) -> &'static str {
    match kind {
        Kind::Reentrant => "reentrant",
        Kind::Read => "read",
        Kind::Write => "write",
        Kind::Fair => "fair",
        Kind::Redisson => "redisson",
        Kind::RedissonFenced => "redisson_fenced",
        Kind::RedissonRead => "redisson_read",
        Kind::RedissonWrite => "redisson_write",
    }
}

/// `["a:{x}", "b:{y}"]`: the templates and the brackets' span.
fn key_list(input: ParseStream) -> syn::Result<(Vec<LitStr>, Span)> {
    if !input.peek(syn::token::Bracket) {
        let tt: TokenTree = input.parse()?;
        return Err(syn::Error::new(
            tt.span(),
            "`keys` takes a list of string literals, e.g. \
             `keys = [\"acct:{from}\", \"acct:{to}\"]`",
        ));
    }
    let content;
    let brackets = syn::bracketed!(content in input);
    let lits = content.parse_terminated(
        |i: ParseStream| {
            if i.peek(LitStr) {
                i.parse::<LitStr>()
            } else {
                let tt: TokenTree = i.parse()?;
                Err(syn::Error::new(
                    tt.span(),
                    "each of `keys` is a key template in a string literal, e.g. \
                     `keys = [\"acct:{from}\", \"acct:{to}\"]`",
                ))
            }
        },
        Token![,],
    )?;
    Ok((lits.into_iter().collect(), brackets.span.join()))
}

/// `permits = 3`: an integer literal from 1 to `u32::MAX`.
fn permits_value(expr: &Expr) -> syn::Result<u32> {
    const HOW: &str = "`permits` takes an integer literal greater than zero, the number of \
                       holders allowed at once, e.g. `permits = 3`";
    let Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(int),
        ..
    }) = expr
    else {
        return Err(syn::Error::new_spanned(expr, HOW));
    };
    match int.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new(
            int.span(),
            "`permits = 0`: a semaphore without permits could never be acquired; give at least \
             one, e.g. `permits = 1` (one holder at a time)",
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(syn::Error::new(
            int.span(),
            format!("{HOW}; `{int}` is not a number from 1 to {}", u32::MAX),
        )),
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
        "on_busy" => "`on_busy = \"skip\"`",
        "map_err" => "`map_err = to_http_error`",
        "kind" => "`kind = \"read\"`",
        "keys" => "`keys = [\"acct:{from}\", \"acct:{to}\"]`",
        "permits" => "`permits = 3`",
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
        Ok(FOREVER) if name != "wait" => errors.push(syn::Error::new(
            lit.span(),
            format!(
                "`{name} = \"forever\"`: only `wait` can be forever; a lease must end, or a \
                 crashed holder would keep the lock for good (the watchdog renews `ttl` while \
                 the body runs, however long that is)"
            ),
        )),
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

/// `wait = "forever"`: wait as long as it takes (`Duration::MAX` at run time).
pub(crate) const FOREVER: u64 = u64::MAX;

const HINT: &str = "write a number and a unit, e.g. \"250ms\", \"1.5s\", \"30s\", \"2m\", \
                    \"2min\", \"1h30m\"";

/// The units a duration may use, largest first, and their length in milliseconds.
const UNITS: &[(&str, u64)] = &[
    ("h", 3_600_000),
    ("min", 60_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// `"250ms"`, `"1.5s"`, `"2min"`, `"1h30m"` -> milliseconds (`"forever"` -> [`FOREVER`]).
///
/// Written here rather than taken from a crate: humantime, the usual choice, takes no fractions
/// (`"1.5s"`) and takes months and years, whose length is a matter of opinion; the grammar
/// below is short, and a proc macro without dependencies keeps users' builds short too. Parts
/// go from the largest unit down, each unit at most once, and must add up to whole
/// milliseconds (Redis leases are whole milliseconds).
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    if text == "forever" {
        return Ok(FOREVER);
    }
    if text.is_empty() {
        return Err(HINT.to_owned());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    // Index in UNITS of the last unit used: the next one must be smaller.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(if rest.starts_with(' ') {
                format!("no spaces in a duration; {HINT}")
            } else if rest.starts_with('-') {
                format!("a duration cannot be negative; {HINT}")
            } else {
                HINT.to_owned()
            });
        }
        let (whole, after) = rest.split_at(digits);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                if n == 0 {
                    return Err(format!("a digit must follow the `.`; {HINT}"));
                }
                f.split_at(n)
            }
            None => ("", after),
        };
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        let Some(index) = UNITS.iter().position(|&(u, _)| u == unit) else {
            return Err(match unit {
                "" if after.starts_with(' ') => format!("no spaces in a duration; {HINT}"),
                "" => format!(
                    "the unit is missing after `{whole}{}`; {HINT}",
                    dot(fraction)
                ),
                _ => format!("unknown unit `{unit}`; {HINT}"),
            });
        };
        // "m" and "min" are one unit.
        let rank = if unit == "m" { index - 1 } else { index };
        if last.is_some_and(|l| rank <= l) {
            return Err(format!(
                "`{unit}` comes after a unit at least as small; write the parts from the \
                 largest unit down, each once, e.g. \"1h30m\""
            ));
        }
        last = Some(rank);
        let scale = UNITS[index].1;
        let too_long = || "the duration is too long to count in milliseconds".to_owned();
        let mut part = whole
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .ok_or_else(too_long)?;
        if !fraction.is_empty() {
            // Exact decimal arithmetic: 1.5s is 1500 ms, and 0.0001s is refused, not rounded.
            let denominator = u32::try_from(fraction.len())
                .ok()
                .and_then(|n| 10u64.checked_pow(n))
                .ok_or_else(|| format!("too many decimals in `{whole}.{fraction}{unit}`"))?;
            let numerator = fraction
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(scale))
                .ok_or_else(|| format!("too many decimals in `{whole}.{fraction}{unit}`"))?;
            if numerator % denominator != 0 {
                return Err(format!(
                    "`{whole}.{fraction}{unit}` is not a whole number of milliseconds; leases \
                     and waits are counted in whole milliseconds"
                ));
            }
            part = part
                .checked_add(numerator / denominator)
                .ok_or_else(too_long)?;
        }
        total = total.checked_add(part).ok_or_else(too_long)?;
        rest = after;
    }
    if total == FOREVER {
        return Err("the duration is too long to count in milliseconds".to_owned());
    }
    Ok(total)
}

fn dot(fraction: &str) -> String {
    if fraction.is_empty() {
        String::new()
    } else {
        format!(".{fraction}")
    }
}

/// "`key`, `ttl`, ...": every option, for messages.
fn listing(attr: Attr) -> String {
    attr.options()
        .iter()
        .map(|o| format!("`{o}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An option we do not know: report it with the valid names (and the closest one), then skip
/// its `= value` so the options after it are still checked.
fn unknown_option(input: ParseStream, attr: Attr) -> syn::Result<syn::Error> {
    let name = input.call(<syn::Ident as syn::ext::IdentExt>::parse_any)?;
    let text = name.to_string();
    let mut msg = format!(
        "unknown option `{text}`; the options of {} are {}",
        attr.name(),
        listing(attr)
    );
    if let Some(best) = closest(&text, attr.options().iter().copied()) {
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
        assert_eq!(parse_duration("2min"), Ok(120_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("1h30min15s250ms"), Ok(5_415_250));
        assert_eq!(parse_duration("1.5s"), Ok(1_500));
        assert_eq!(parse_duration("0.25s"), Ok(250));
        assert_eq!(parse_duration("1.5h"), Ok(5_400_000));
        assert_eq!(parse_duration("0s"), Ok(0));
        assert_eq!(parse_duration("forever"), Ok(FOREVER));
        for (bad, why) in [
            ("", "write a number and a unit"),
            ("s", "write a number and a unit"),
            ("30", "the unit is missing after `30`"),
            ("1.5", "the unit is missing after `1.5`"),
            ("1.s", "a digit must follow"),
            ("30 s", "no spaces"),
            ("1h 30m", "no spaces"),
            ("-1s", "cannot be negative"),
            ("30sec", "unknown unit `sec`"),
            ("1d", "unknown unit `d`"),
            ("30m1h", "from the largest unit down"),
            ("1m2min", "from the largest unit down"),
            ("0.0001s", "not a whole number of milliseconds"),
            ("1.5ms", "not a whole number of milliseconds"),
            ("99999999999999999999h", "too long"),
            ("5124095576030431h", "too long"),
        ] {
            let e = parse_duration(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
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
            e.contains(
                "`key`, `keys`, `kind`, `ttl`, `wait`, `lease`, `client`, `on_busy`, \
                 `map_err`, `crate`"
            ),
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
        assert!(err(r#""order:{id}""#).contains("write `key = \"order:{id}\"`"));
        assert!(err(r#"on_busy = "wait""#).contains("`on_busy = \"skip\"`"));
        assert!(err(r#"ttl = "forever""#).contains("only `wait` can be forever"));
        let a = parse(r#"wait = "forever", on_busy = "skip", map_err = to_http"#).unwrap();
        assert_eq!(a.wait.unwrap().millis, FOREVER);
        assert!(a.on_busy.unwrap().0 == OnBusy::Skip);
        assert!(a.map_err.is_some());
    }

    fn err_for(src: &str, attr: Attr) -> String {
        use syn::parse::Parser;
        let parser = |i: ParseStream| Args::parse_for(i, attr);
        let result = parser
            .parse_str(src)
            .and_then(|mut a| std::mem::take(&mut a.problems).finish());
        match result {
            Ok(()) => panic!("`{src}` parsed"),
            Err(e) => e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" | "),
        }
    }

    #[test]
    fn family_options() {
        let a = parse(r#"kind = "read", key = "a""#).unwrap();
        assert_eq!(a.kind.unwrap().0, Kind::Read);
        for (text, kind) in [
            ("reentrant", Kind::Reentrant),
            ("write", Kind::Write),
            ("fair", Kind::Fair),
            ("redisson", Kind::Redisson),
            ("redisson_fenced", Kind::RedissonFenced),
            ("redisson_read", Kind::RedissonRead),
            ("redisson_write", Kind::RedissonWrite),
        ] {
            let a = parse(&format!("kind = {text:?}")).unwrap();
            assert_eq!(a.kind.unwrap().0, kind);
        }
        let a = parse(r#"keys = ["acct:{from}", "acct:{to}",]"#).unwrap();
        let keys: Vec<String> = a.keys.unwrap().iter().map(LitStr::value).collect();
        assert_eq!(keys, ["acct:{from}", "acct:{to}"]);
        assert!(parse(r#"keys = ["a"], kind = "reentrant""#).is_ok());

        let e = err(r#"kind = "exclusive""#);
        assert!(e.contains("unknown kind `exclusive`"), "{e}");
        assert!(e.contains("`kind = \"fair\"`"), "{e}");
        assert!(e.contains("leave `kind` out"), "{e}");
        assert!(err(r#"kind = "reed""#).contains("did you mean `kind = \"read\"`"));
        let e = err(r#"key = "a", keys = ["b"]"#);
        assert!(
            e.contains("`key` and `keys` cannot be used together"),
            "{e}"
        );
        assert!(err("keys = []").contains("`keys = []` is empty"));
        assert!(err(r#"keys = "a""#).contains("`keys` takes a list"));
        assert!(err("keys = [a]").contains("a key template in a string literal"));
        let e = err(r#"keys = ["a"], kind = "read""#);
        assert!(
            e.contains("cannot be combined with `kind = \"read\"`"),
            "{e}"
        );
        let e = err("permits = 2");
        assert!(
            e.contains("`permits` is an option of #[distributed_semaphore]"),
            "{e}"
        );
    }

    #[test]
    fn semaphore_options() {
        use syn::parse::Parser;
        let parser = |i: ParseStream| Args::parse_for(i, Attr::Semaphore);
        let a = parser
            .parse_str(r#"key = "exports", permits = 3, ttl = "5s""#)
            .unwrap();
        assert!(a.problems.is_empty());
        assert_eq!(a.permits, Some(3));
        let e = err_for("permits = 0", Attr::Semaphore);
        assert!(e.contains("`permits = 0`"), "{e}");
        assert!(e.contains("give at least one"), "{e}");
        for bad in [
            "permits = -1",
            "permits = \"3\"",
            "permits = 4294967296",
            "permits = n",
        ] {
            let e = err_for(bad, Attr::Semaphore);
            assert!(
                e.contains("integer literal greater than zero"),
                "{bad}: {e}"
            );
        }
        let e = err_for(r#"key = "a""#, Attr::Semaphore);
        assert!(e.contains("needs `permits = N`"), "{e}");
        let e = err_for(
            r#"permits = 1, kind = "read", keys = ["a"]"#,
            Attr::Semaphore,
        );
        assert!(
            e.contains("`kind` is an option of #[distributed_lock]"),
            "{e}"
        );
        assert!(
            e.contains("`keys` is an option of #[distributed_lock]"),
            "{e}"
        );
        let e = err_for("permit = 1", Attr::Semaphore);
        assert!(
            e.contains("the options of #[distributed_semaphore] are `key`, `permits`"),
            "{e}"
        );
        assert!(e.contains("did you mean `permits`"), "{e}");
    }
}
