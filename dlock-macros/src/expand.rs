//! Stage 3: code generation.
//!
//! The `async fn` keeps its signature, attributes and visibility; only its body is replaced by:
//! render the key -> get the client -> acquire (an error returns `Err(From::from(e))` and the
//! body never runs) -> run the original body as an `async move` block inside the guard's
//! reentrancy scope -> release -> return the body's result. Keeping the body in its own async
//! block keeps `return` and `?` local to it, so they can never skip the release.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{AttrStyle, GenericArgument, ItemFn, Path, PathArguments, ReturnType, Type};

use crate::args::{Args, Attr, DurationArg, Kind, OnBusy, FOREVER};
use crate::diagnostics::Errors;
use crate::key::Template;

/// Parses the attribute and the item and writes the new item.
pub(crate) fn expand(
    which: Attr,
    attr: TokenStream,
    item: TokenStream,
) -> syn::Result<TokenStream> {
    use syn::parse::Parser;
    let mut errors = Errors::default();
    let parser = |input: syn::parse::ParseStream| Args::parse_for(input, which);
    let args = match parser.parse2(attr) {
        Ok(mut args) => {
            errors = std::mem::take(&mut args.problems);
            Some(args)
        }
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let func = match syn::parse2::<ItemFn>(item) {
        Ok(func) => func,
        Err(e) => {
            errors.push(syn::Error::new(
                e.span(),
                format!(
                    "{} goes on a function with a body (an `async fn`, or a plain `fn` for the \
                     blocking client): {e}",
                    which.name()
                ),
            ));
            errors.finish()?;
            unreachable!("an error was pushed");
        }
    };
    let shape_ok = check_shape(&func, which)
        .map_err(|e| errors.push(e))
        .is_ok();
    let error_site = if shape_ok || !looks_like_async_trait(&func) {
        error_site(&func.sig, which).map_err(|e| errors.push(e))
    } else {
        // Its `Pin<Box<dyn Future>>` return type is not the user's mistake: say nothing more.
        Err(())
    };
    let mut compile = |lit: &syn::LitStr| {
        Template::parse(lit)
            .and_then(|t| t.check(&func.sig).map(|()| t))
            .map_err(|e| errors.push(e))
            .ok()
    };
    let template = args
        .as_ref()
        .and_then(|a| a.key.as_ref())
        .and_then(&mut compile);
    // Every template of `keys`, each checked like `key` (all of them, errors together).
    let templates: Vec<Option<Template>> = args
        .as_ref()
        .and_then(|a| a.keys.as_ref())
        .map(|lits| lits.iter().map(&mut compile).collect())
        .unwrap_or_default();
    if let (Some(args), Ok(site)) = (&args, &error_site) {
        if let Some((OnBusy::Skip, span)) = args.on_busy {
            check_skip(site, span, &func.sig.output, which)
                .map_err(|e| errors.push(e))
                .ok();
        }
    }
    errors.finish()?;
    let (Some(args), Ok(error_site)) = (args, error_site) else {
        unreachable!("errors were reported above");
    };
    let templates: Vec<Template> = templates.into_iter().flatten().collect();
    let what = match (which, args.permits, templates.is_empty()) {
        (Attr::Semaphore, Some(permits), _) => What::Semaphore(template.as_ref(), permits),
        (Attr::Lock, _, false) => What::Multi(&templates),
        _ => What::Lock(
            args.kind.map_or(Kind::Reentrant, |(k, _)| k),
            template.as_ref(),
        ),
    };
    Ok(generate(&args, what, func, error_site))
}

/// What the function takes before its body runs.
enum What<'t> {
    /// One lock of the family, on `key` (or the default key).
    Lock(Kind, Option<&'t Template>),
    /// `keys = [...]`: a multi-lock; never empty.
    Multi(&'t [Template]),
    /// A permit of a semaphore of that many permits, on `key` (or the default key).
    Semaphore(Option<&'t Template>, u32),
}

/// An `async fn` takes the lock with the async client; a plain `fn` with the blocking one
/// (`dlock::blocking`). What neither can lock is refused here.
fn check_shape(func: &ItemFn, which: Attr) -> syn::Result<()> {
    let name = which.name();
    if func.sig.asyncness.is_some() {
        return Ok(());
    }
    if looks_like_async_trait(func) {
        return Err(syn::Error::new(
            func.sig.fn_token.span,
            format!(
                "{name} sees this method after #[async_trait] turned it into a plain `fn` \
                 returning a boxed future, and cannot lock that; no attribute order fixes it, \
                 because #[async_trait] on the impl always expands first. Use a native `async \
                 fn` in the trait (Rust 1.75+) instead of #[async_trait], or put {name} on an \
                 inherent `async fn` and call it from the trait method"
            ),
        ));
    }
    if let Some(constness) = &func.sig.constness {
        return Err(syn::Error::new(
            constness.span,
            format!(
                "{name} cannot go on a `const fn`: taking a lock talks to the store at run \
                 time; remove `const`"
            ),
        ));
    }
    Ok(())
}

/// #[async_trait] output: `fn f(..) -> Pin<Box<dyn Future<..> + ..>> { Box::pin(async move ..) }`.
fn looks_like_async_trait(func: &ItemFn) -> bool {
    let returns_pin = match &func.sig.output {
        ReturnType::Type(_, ty) => last_segment(ty).is_some_and(|s| s.ident == "Pin"),
        ReturnType::Default => false,
    };
    let body = func.block.stmts.last().map(|s| quote!(#s).to_string());
    returns_pin || body.is_some_and(|b| b.starts_with("Box :: pin (async"))
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        Type::Group(g) => last_segment(&g.elem),
        Type::Paren(p) => last_segment(&p.elem),
        _ => None,
    }
}

/// Where the lock error is converted into the function's error type.
struct ErrorSite {
    /// The return type is spelled `Result<..>`; anything else (`io::Result<T>`, `JobResult`)
    /// may be an alias or may not be a `Result` at all, so its `Err` is built through
    /// `__private::LockResult`, which says so when it is not one.
    spelled_result: bool,
    /// `T` of `Result<T, E>`, when written out (checked by `on_busy = "skip"`).
    ok: Option<Type>,
    /// What rustc blames when the error type has no `From<LockError>`: the `E` of
    /// `Result<T, E>` when written out, else the whole return type (`io::Result<T>`).
    span: Span,
    /// `E`, when written out: the conversion then names it, so rustc's error does too.
    ty: Option<Type>,
}

/// Checks the return type is `Result<..>` and finds the error type in it.
fn error_site(sig: &syn::Signature, which: Attr) -> syn::Result<ErrorSite> {
    let how = format!(
        "{} needs the function to return `Result<T, E>` with `E: From<dlock::LockError>`: when \
         the lock cannot be taken the function returns `Err(LockError.into())` instead of \
         running the body",
        which.name()
    );
    let ty = match &sig.output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.ident.span(),
                format!("{how}; this function returns `()`"),
            ))
        }
    };
    // Syntactic, as a macro must be: `Result`, `io::Result`, `anyhow::Result` and aliases named
    // like `JobResult` pass; rustc then checks the `Err(..)` the expansion builds.
    let Some(last) = last_segment(ty).filter(|s| s.ident.to_string().ends_with("Result")) else {
        return Err(syn::Error::new_spanned(ty, how));
    };
    let type_args: Vec<&Type> = match &last.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let error_type = type_args.get(1).copied();
    Ok(ErrorSite {
        spelled_result: last.ident == "Result",
        ok: type_args.first().map(|t| (*t).clone()),
        span: error_type.map_or_else(|| ty.span(), Spanned::span),
        ty: error_type.filter(|t| !contains_impl_or_infer(t)).cloned(),
    })
}

/// `on_busy = "skip"` answers `Ok(None)`: the `T` of `Result<T, E>` must be an `Option`.
fn check_skip(site: &ErrorSite, span: Span, output: &ReturnType, which: Attr) -> syn::Result<()> {
    if site
        .ok
        .as_ref()
        .and_then(last_segment)
        .is_some_and(|s| s.ident == "Option")
    {
        return Ok(());
    }
    let busy = match which {
        Attr::Lock => "another owner keeps the lock",
        Attr::Semaphore => "no permit frees up",
    };
    let message = format!(
        "`on_busy = \"skip\"` returns `Ok(None)` when {busy} for the whole `wait`, so the \
         function must return `Result<Option<T>, E>`: wrap the value in `Option`, or leave \
         `on_busy` out to get `Err(LockError::Timeout)` instead"
    );
    // At the return type, the thing to change; at the option when there is none.
    let err = match output {
        ReturnType::Type(_, ty) => syn::Error::new_spanned(ty, message),
        ReturnType::Default => syn::Error::new(span, message),
    };
    Err(err)
}

fn contains_impl_or_infer(ty: &Type) -> bool {
    let text = quote!(#ty).to_string();
    text.contains("impl ")
        || text
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|w| w == "_")
}

fn generate(args: &Args, what: What<'_>, func: ItemFn, error_site: ErrorSite) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let user_braces = block.brace_token.span.join();
    let (inner_attrs, outer_attrs): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|a| matches!(a.style, AttrStyle::Inner(_)));
    let krate: Path = args
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::dlock));

    // Our locals are mixed-site: the user's body cannot name them and they cannot shadow the
    // user's parameters, whatever those are called.
    let m = Span::mixed_site();
    let key = syn::Ident::new("__dlock_key", m);
    let client = syn::Ident::new("__dlock_client", m);
    let guard = syn::Ident::new("__dlock_guard", m);
    let err = syn::Ident::new("__dlock_err", m);
    let ret = syn::Ident::new("__dlock_ret", m);
    let acquired = syn::Ident::new("__dlock_acquired", m);

    // Pin the body's type like async-trait does, so `?` and `.into()` inside it still infer.
    let ret_ty = match &sig.output {
        ReturnType::Type(_, ty) => {
            let mut ty = (**ty).clone();
            ImplTraitToInfer.visit_type_mut(&mut ty);
            quote!(#ty)
        }
        ReturnType::Default => quote!(()),
    };

    // Spanned at the `E` of `Result<T, E>` and naming it when written out: without
    // `From<LockError>` rustc then blames the user's error type, not the attribute.
    let error_span = error_site.span;
    let convert = match (&args.map_err, &error_site.ty) {
        // The user's function: a type mismatch is then reported at their path.
        (Some(map), _) => quote_spanned! {map.span()=> (#map) },
        // Through `__private::FromLockError`, whose message says how to give `E` the
        // conversion (an impl, or `map_err`) when it has none.
        (None, Some(e)) => quote_spanned! {error_span=>
            <#e as #krate::__private::FromLockError>::from_lock_error
        },
        // No `E` to name (an alias, or not a `Result` at all): `From::from`, whose target is
        // inferred, so a return type that is no `Result` gets `LockResult`'s one message.
        (None, None) => quote_spanned! {error_span=> ::core::convert::From::from },
    };
    // With `map_err`, the whole conversion is the user's function's: a type mismatch is then
    // reported there alone, not stretched from the option to the return type.
    let err_span = args.map_err.as_ref().map_or(error_span, Spanned::span);
    let lock_failed = if error_site.spelled_result {
        quote_spanned! {err_span=> ::core::result::Result::Err(#convert(#err)) }
    } else {
        let ret_span = match &sig.output {
            ReturnType::Type(_, ty) => ty.span(),
            ReturnType::Default => error_span,
        };
        quote_spanned! {ret_span=>
            <#ret_ty as #krate::__private::LockResult>::from_error(#convert(#err))
        }
    };

    let template = match what {
        What::Lock(_, t) | What::Semaphore(t, _) => t,
        What::Multi(_) => None,
    };
    let key_expr = match (template, &what) {
        (_, What::Multi(templates)) => {
            let keys = templates.iter().map(|t| t.render(&krate));
            quote! { [#(#keys),*] }
        }
        (Some(t), _) => t.render(&krate),
        (None, _) => {
            let name = sig.ident.to_string();
            let name = name.strip_prefix("r#").unwrap_or(&name);
            if sig.receiver().is_some() {
                // A method: the receiver's type is part of the name, so `Cleanup::run` and
                // `Report::run` (two impls of one trait in one module) never share a lock.
                let format = format!("{{}}::{{}}::{name}");
                quote! {
                    ::std::format!(
                        #format,
                        ::core::module_path!(),
                        #krate::__private::type_key::<Self>()
                    )
                }
            } else {
                quote! {
                    ::std::string::String::from(
                        ::core::concat!(::core::module_path!(), "::", #name)
                    )
                }
            }
        }
    };

    // A plain `fn` takes the lock through the blocking client: the same handles and guards,
    // each call run on the client's own thread, re-entry following the calling thread.
    let sync = sig.asyncness.is_none();
    let client_ty = if sync {
        quote! { #krate::blocking::LockClient }
    } else {
        quote! { #krate::LockClient }
    };
    let get_client = match &args.client {
        // `&(expr)` then deref coercion: `self.locks`, `state.locks`, `&client` and
        // `Arc<LockClient>` all work, and nothing is cloned.
        Some(expr) if !sync => quote! { let #client: &#krate::LockClient = &(#expr); },
        // Through a trait, so an async `LockClient` given to a plain `fn` is one error saying
        // what to pass instead (rustc's "expected `LockClient`, found `LockClient`" would not).
        Some(expr) => quote_spanned! {expr.span()=>
            let #client: &#krate::blocking::LockClient =
                #krate::__private::BlockingClient::blocking_client(&(#expr));
        },
        None => quote! {
            let #client = match #client_ty::global() {
                ::core::result::Result::Ok(c) => c,
                #[allow(clippy::useless_conversion)] // `E` may be `LockError` itself
                ::core::result::Result::Err(#err) => return #lock_failed,
            };
        },
    };

    let option = |name: &str, d: &Option<DurationArg>| {
        d.as_ref().map(|d| {
            let method = syn::Ident::new(name, d.span);
            if d.millis == FOREVER {
                return quote_spanned! {d.span=> .#method(::core::time::Duration::MAX) };
            }
            let millis = proc_macro2::Literal::u64_unsuffixed(d.millis);
            quote_spanned! {d.span=> .#method(::core::time::Duration::from_millis(#millis)) }
        })
    };
    let options = [
        option("ttl", &args.ttl),
        option("lease", &args.lease),
        option("wait", &args.wait),
    ];

    // `on_busy = "skip"`: only a lock that stayed busy is skipped; Redis down, no client and
    // the like are still errors, or a job would silently never run.
    let busy = match args.on_busy {
        Some((OnBusy::Skip, _)) => quote! {
            ::core::result::Result::Err(#krate::LockError::Timeout { .. }) => {
                ::core::result::Result::Ok(::core::option::Option::None)
            }
        },
        _ => quote!(),
    };

    // A `match` rather than `let guard = ...?`: the guard is bound in the arm that runs the
    // body, so nothing (clippy's `significant_drop_tightening` included) can mistake it for a
    // binding that outlives its use.
    let key_ty = match &what {
        What::Multi(templates) => {
            let n = proc_macro2::Literal::usize_unsuffixed(templates.len());
            quote! { [::std::string::String; #n] }
        }
        _ => quote! { ::std::string::String },
    };
    // What is taken, and how the body runs and the hold is given back.
    let (handle, run, release) = match what {
        What::Lock(kind, t) => {
            // Metrics are labelled with the template, never the rendered key (bounded series);
            // without a template the key is the function's path, fixed already.
            let label = match t {
                Some(t) => t.lit.value(),
                None => sig.ident.to_string(),
            };
            let handle = match kind {
                Kind::Reentrant => quote! { #client.lock(#key) },
                Kind::Read => quote! { #client.read_write_lock(#key).read() },
                Kind::Write => quote! { #client.read_write_lock(#key).write() },
                Kind::Fair => quote! { #client.fair_lock(#key) },
                Kind::Redisson => quote! { #client.redisson_lock(#key) },
                Kind::RedissonFenced => quote! { #client.redisson_fenced_lock(#key) },
                Kind::RedissonRead => quote! { #client.redisson_read_write_lock(#key).read() },
                Kind::RedissonWrite => quote! { #client.redisson_read_write_lock(#key).write() },
            };
            let handle = quote! { #handle.label(#label) };
            if sync {
                (
                    handle,
                    // The guard, alive on this thread while the body runs, is the scope.
                    quote! { (move || -> #ret_ty #block)() },
                    quote! { #krate::blocking::LockGuard::release_written(#guard); },
                )
            } else {
                (
                    handle,
                    quote! { #guard.scope(async move #block).await },
                    quote! { #krate::LockGuard::release_written(#guard).await; },
                )
            }
        }
        What::Multi(templates) => {
            let label: Vec<String> = templates.iter().map(|t| t.lit.value()).collect();
            let label = label.join(",");
            let handle = quote! { #client.multi_lock(#key).label(#label) };
            if sync {
                (
                    handle,
                    quote! { (move || -> #ret_ty #block)() },
                    quote! { #krate::blocking::MultiGuard::release_logged(#guard); },
                )
            } else {
                (
                    handle,
                    quote! { #krate::MultiGuard::scope(&#guard, async move #block).await },
                    quote! { #krate::MultiGuard::release_logged(#guard).await; },
                )
            }
        }
        What::Semaphore(t, permits) => {
            let permits = proc_macro2::Literal::u32_unsuffixed(permits);
            let label = t.map_or_else(|| sig.ident.to_string(), |t| t.lit.value());
            let handle = quote! { #client.semaphore(#key, #permits).label(#label) };
            // Permits are not re-entrant: no scope, the body runs as it is.
            if sync {
                (
                    handle,
                    quote! { (move || -> #ret_ty #block)() },
                    quote! { #krate::blocking::Permit::release_logged(#guard); },
                )
            } else {
                (
                    handle,
                    quote! { (async move #block).await },
                    quote! { #krate::Permit::release_logged(#guard).await; },
                )
            }
        }
    };
    // A plain `fn`'s body runs as a closure called at once, so `return` and `?` end it and
    // not the function: they cannot skip the release.
    let allow_closure = sync.then(|| quote! { #[allow(clippy::redundant_closure_call)] });
    let acquire = if sync {
        quote! { .acquire() }
    } else {
        quote! { .acquire().await }
    };
    let body = quote! {
        #(#inner_attrs)*
        let #key: #key_ty = #key_expr;
        #get_client
        let #acquired = #handle #(#options)* #acquire;
        match #acquired {
            ::core::result::Result::Ok(#guard) => {
                #allow_closure
                let #ret: #ret_ty = #run;
                // The body's result wins over a failed release: its effects already
                // happened, and the lease expires on its own. The runtime logs it.
                #release
                #ret
            }
            #busy
            #[allow(clippy::useless_conversion)] // `E` may be `LockError` itself
            ::core::result::Result::Err(#err) => #lock_failed,
        }
    };
    // The new body keeps the braces' original span: rustc skips `dead_code` (and other lints)
    // for a fn whose item span ends in macro-generated tokens, so unused annotated fns would
    // silently stop being reported.
    let mut body = proc_macro2::Group::new(proc_macro2::Delimiter::Brace, body);
    body.set_span(user_braces);
    quote! {
        #(#outer_attrs)*
        #vis #sig #body
    }
}

/// `impl Trait` cannot be written in a `let` type; `_` keeps the rest of the type pinned.
struct ImplTraitToInfer;

impl VisitMut for ImplTraitToInfer {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(it) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                underscore_token: syn::Token![_](it.impl_token.span),
            });
            return;
        }
        syn::visit_mut::visit_type_mut(self, ty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(attr: &str, item: &str) -> Result<String, String> {
        expand(Attr::Lock, attr.parse().unwrap(), item.parse().unwrap())
            .map(|t| t.to_string())
            .map_err(|e| {
                e.into_iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
    }

    #[test]
    fn expansion_shape() {
        let out = expand_str(
            r#"key = "order:{order.id}", ttl = "30s", wait = "5s""#,
            "/// Pays.\n#[inline] pub async fn pay(order: &Order) -> Result<u8, AppError> { \
             Ok(order.amount) }",
        )
        .unwrap();
        let want = quote! {
            #[doc = " Pays."]
            #[inline]
            pub async fn pay(order: &Order) -> Result<u8, AppError> {
                let __dlock_key: ::std::string::String =
                    ::std::format!("order:{}", ::dlock::KeyPart(&::std::format_args!("{}", order.id)));
                let __dlock_client = match ::dlock::LockClient::global() {
                    ::core::result::Result::Ok(c) => c,
                    #[allow(clippy::useless_conversion)]
                    ::core::result::Result::Err(__dlock_err) =>
                        return ::core::result::Result::Err(
                            <AppError as ::dlock::__private::FromLockError>::from_lock_error(__dlock_err)),
                };
                let __dlock_acquired = __dlock_client.lock(__dlock_key)
                    .label("order:{order.id}")
                    .ttl(::core::time::Duration::from_millis(30000))
                    .wait(::core::time::Duration::from_millis(5000))
                    .acquire().await;
                match __dlock_acquired {
                    ::core::result::Result::Ok(__dlock_guard) => {
                        let __dlock_ret: Result<u8, AppError> =
                            __dlock_guard.scope(async move { Ok(order.amount) }).await;
                        ::dlock::LockGuard::release_written(__dlock_guard).await;
                        __dlock_ret
                    }
                    #[allow(clippy::useless_conversion)]
                    ::core::result::Result::Err(__dlock_err) =>
                        ::core::result::Result::Err(
                            <AppError as ::dlock::__private::FromLockError>::from_lock_error(__dlock_err)),
                }
            }
        };
        assert_eq!(out, want.to_string());
    }

    #[test]
    fn client_crate_default_key_and_impl_trait() {
        let out = expand_str(
            r#"client = self.locks, crate = "my::dlock", lease = "2m""#,
            "async fn m(&self) -> Result<impl Display, E> { #![allow(unused)] todo!() }",
        )
        .unwrap();
        assert!(
            out.contains("let __dlock_client : & my :: dlock :: LockClient = & (self . locks) ;"),
            "{out}"
        );
        // A method: the receiver's type is in the default key.
        assert!(
            out.contains(
                "format ! (\"{}::{}::m\" , :: core :: module_path ! () , \
                 my :: dlock :: __private :: type_key :: < Self > ())"
            ),
            "{out}"
        );
        assert!(
            out.contains(". lease (:: core :: time :: Duration :: from_millis (120000))"),
            "{out}"
        );
        assert!(out.contains("let __dlock_ret : Result < _ , E >"), "{out}");
        assert!(
            out.contains("{ # ! [allow (unused)] let __dlock_key"),
            "{out}"
        );
        assert!(
            out.contains("my :: dlock :: LockGuard :: release_written"),
            "{out}"
        );
        // No `E` written out (an alias): the conversion falls back to `From::from`.
        let out = expand_str("", "async fn f() -> io::Result<()> { Ok(()) }").unwrap();
        assert!(
            out.contains("Err (:: core :: convert :: From :: from (__dlock_err))"),
            "{out}"
        );
        let out = expand_str("", "async fn f() -> JobResult<()> { Ok(()) }").unwrap();
        let fallback = "< JobResult < () > as :: dlock :: __private :: LockResult > :: \
                        from_error (:: core :: convert :: From :: from (__dlock_err))";
        assert!(out.contains(fallback), "{out}");
        assert!(
            out.contains(":: core :: module_path ! () , \"::\" , \"f\""),
            "{out}"
        );
    }

    #[test]
    fn skip_map_err_forever() {
        let out = expand_str(
            r#"on_busy = "skip", map_err = to_http, wait = "forever""#,
            "async fn f() -> Result<Option<u8>, (u16, String)> { Ok(None) }",
        )
        .unwrap();
        assert!(
            out.contains(
                "Err (:: dlock :: LockError :: Timeout { .. }) => \
                 { :: core :: result :: Result :: Ok (:: core :: option :: Option :: None) }"
            ),
            "{out}"
        );
        assert!(out.contains("Err ((to_http) (__dlock_err))"), "{out}");
        assert!(
            out.contains(". wait (:: core :: time :: Duration :: MAX)"),
            "{out}"
        );
        for ret in ["Result<u8, E>", "Result<Vec<Option<u8>>, E>", "JobResult"] {
            let e = expand_str(
                r#"on_busy = "skip""#,
                &format!("async fn f() -> {ret} {{ todo!() }}"),
            )
            .unwrap_err();
            assert!(
                e.contains("must return `Result<Option<T>, E>`"),
                "{ret}: {e}"
            );
        }
        assert!(expand_str(
            r#"on_busy = "skip""#,
            "async fn f() -> io::Result<Option<u8>> { Ok(None) }"
        )
        .is_ok());
    }

    #[test]
    fn item_errors() {
        let e = expand_str("", "const fn f() -> Result<(), E> { Ok(()) }").unwrap_err();
        assert!(e.contains("cannot go on a `const fn`"), "{e}");
        let e = expand_str("", "fn f() -> u8 { 1 }").unwrap_err();
        assert!(
            e.contains("needs the function to return `Result<T, E>`"),
            "{e}"
        );
        let e = expand_str("", "async fn f() -> u8 { 1 }").unwrap_err();
        assert!(
            e.contains("needs the function to return `Result<T, E>`"),
            "{e}"
        );
        let e = expand_str("", "async fn f() {}").unwrap_err();
        assert!(e.contains("returns `()`"), "{e}");
        let e = expand_str(
            "",
            "fn f<'a>(&'a self) -> Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'a>> { \
             Box::pin(async move { Ok(()) }) }",
        )
        .unwrap_err();
        assert!(e.contains("#[async_trait]"), "{e}");
        assert!(expand_str("", "struct S;")
            .unwrap_err()
            .contains("goes on a function with a body"));
        assert!(expand_str("", "async fn f() -> io::Result<()> { Ok(()) }").is_ok());
        assert!(expand_str("", "async fn f() -> JobResult<()> { Ok(()) }").is_ok());
        assert!(expand_str("", "async fn f() -> Option<()> { None }").is_err());
    }

    #[test]
    fn all_errors_at_once() {
        let e = expand_str(
            r#"key = "{nope}", ttl = "1x""#,
            "const fn f(id: u8) -> u8 { 1 }",
        )
        .unwrap_err();
        for part in ["unknown unit", "`const fn`", "`Result<T, E>`"] {
            assert!(e.contains(part), "{part} missing from {e}");
        }
        // The key is checked even when the other options are wrong.
        let e = expand_str(
            r#"key = "{nope}", ttl = "1x""#,
            "async fn f(id: u8) -> Result<(), E> { Ok(()) }",
        )
        .unwrap_err();
        assert!(e.contains("no parameter `nope`"), "{e}");
    }

    fn expand_as(which: Attr, attr: &str, item: &str) -> Result<String, String> {
        expand(which, attr.parse().unwrap(), item.parse().unwrap())
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn family_expansions() {
        let item = "async fn f(id: u8) -> Result<(), E> { Ok(()) }";
        for (kind, handle) in [
            (
                "read",
                "__dlock_client . read_write_lock (__dlock_key) . read ()",
            ),
            (
                "write",
                "__dlock_client . read_write_lock (__dlock_key) . write ()",
            ),
            ("fair", "__dlock_client . fair_lock (__dlock_key)"),
            ("reentrant", "__dlock_client . lock (__dlock_key)"),
            ("redisson", "__dlock_client . redisson_lock (__dlock_key)"),
            (
                "redisson_fenced",
                "__dlock_client . redisson_fenced_lock (__dlock_key)",
            ),
            (
                "redisson_read",
                "__dlock_client . redisson_read_write_lock (__dlock_key) . read ()",
            ),
            (
                "redisson_write",
                "__dlock_client . redisson_read_write_lock (__dlock_key) . write ()",
            ),
        ] {
            let out = expand_str(&format!(r#"key = "k:{{id}}", kind = "{kind}""#), item).unwrap();
            assert!(
                out.contains(&format!(
                    "let __dlock_acquired = {handle} . label (\"k:{{id}}\") . acquire () . await"
                )),
                "{kind}: {out}"
            );
            assert!(out.contains("__dlock_guard . scope (async move"), "{out}");
            assert!(out.contains(":: dlock :: LockGuard :: release_written (__dlock_guard)"));
        }

        let out = expand_str(
            r#"keys = ["acct:{from}", "acct:{to}"], wait = "1s""#,
            "async fn t(from: u8, to: u8) -> Result<(), E> { Ok(()) }",
        )
        .unwrap();
        assert!(
            out.contains(
                "let __dlock_key : [:: std :: string :: String ; 2] = [:: std :: format !"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "__dlock_client . multi_lock (__dlock_key) . label (\"acct:{from},acct:{to}\") \
                 . wait (:: core :: time :: Duration :: from_millis (1000)) . acquire () . await"
            ),
            "{out}"
        );
        assert!(out.contains(":: dlock :: MultiGuard :: scope (& __dlock_guard , async move"));
        assert!(out.contains(":: dlock :: MultiGuard :: release_logged (__dlock_guard)"));
        // Each template is checked against the signature, all errors together.
        let e = expand_str(
            r#"keys = ["acct:{frm}", "acct:{too}"]"#,
            "async fn t(from: u8, to: u8) -> Result<(), E> { Ok(()) }",
        )
        .unwrap_err();
        assert!(
            e.contains("no parameter `frm`") && e.contains("no parameter `too`"),
            "{e}"
        );

        let out = expand_as(
            Attr::Semaphore,
            r#"key = "exports:{id}", permits = 2, on_busy = "skip""#,
            "async fn x(id: u8) -> Result<Option<u8>, E> { Ok(Some(id)) }",
        )
        .unwrap();
        assert!(
            out.contains(
                "__dlock_client . semaphore (__dlock_key , 2) . label (\"exports:{id}\") \
                 . acquire () . await"
            ),
            "{out}"
        );
        assert!(
            out.contains("(async move { Ok (Some (id)) }) . await"),
            "{out}"
        );
        assert!(out.contains(":: dlock :: Permit :: release_logged (__dlock_guard)"));
        assert!(out.contains("LockError :: Timeout { .. }) =>"), "{out}");
        let e = expand_as(
            Attr::Semaphore,
            "permits = 1",
            "const fn f() -> Result<(), E> { Ok(()) }",
        )
        .unwrap_err();
        assert!(
            e.contains("#[distributed_semaphore] cannot go on a `const fn`"),
            "{e}"
        );
    }

    #[test]
    fn sync_expansions() {
        let out = expand_str(
            r#"key = "order:{id}", ttl = "30s""#,
            "fn pay(id: u8) -> Result<u8, AppError> { Ok(id) }",
        )
        .unwrap();
        let want = quote! {
            fn pay(id: u8) -> Result<u8, AppError> {
                let __dlock_key: ::std::string::String =
                    ::std::format!("order:{}", ::dlock::KeyPart(&::std::format_args!("{}", id)));
                let __dlock_client = match ::dlock::blocking::LockClient::global() {
                    ::core::result::Result::Ok(c) => c,
                    #[allow(clippy::useless_conversion)]
                    ::core::result::Result::Err(__dlock_err) =>
                        return ::core::result::Result::Err(
                            <AppError as ::dlock::__private::FromLockError>::from_lock_error(__dlock_err)),
                };
                let __dlock_acquired = __dlock_client.lock(__dlock_key)
                    .label("order:{id}")
                    .ttl(::core::time::Duration::from_millis(30000))
                    .acquire();
                match __dlock_acquired {
                    ::core::result::Result::Ok(__dlock_guard) => {
                        #[allow(clippy::redundant_closure_call)]
                        let __dlock_ret: Result<u8, AppError> =
                            (move || -> Result<u8, AppError> { Ok(id) })();
                        ::dlock::blocking::LockGuard::release_written(__dlock_guard);
                        __dlock_ret
                    }
                    #[allow(clippy::useless_conversion)]
                    ::core::result::Result::Err(__dlock_err) =>
                        ::core::result::Result::Err(
                            <AppError as ::dlock::__private::FromLockError>::from_lock_error(__dlock_err)),
                }
            }
        };
        assert_eq!(out, want.to_string());

        let out = expand_str(
            r#"keys = ["a:{x}", "b:{x}"], client = self.locks"#,
            "fn t(&self, x: u8) -> Result<(), E> { Ok(()) }",
        )
        .unwrap();
        assert!(
            out.contains(
                "let __dlock_client : & :: dlock :: blocking :: LockClient = :: dlock :: \
                 __private :: BlockingClient :: blocking_client (& (self . locks)) ;"
            ),
            "{out}"
        );
        assert!(
            out.contains(":: dlock :: blocking :: MultiGuard :: release_logged (__dlock_guard) ;"),
            "{out}"
        );
        assert!(!out.contains("await"), "{out}");

        let out = expand_as(
            Attr::Semaphore,
            r#"permits = 2"#,
            "fn x() -> Result<(), E> { Ok(()) }",
        )
        .unwrap();
        assert!(
            out.contains(":: dlock :: blocking :: Permit :: release_logged (__dlock_guard) ;"),
            "{out}"
        );
        assert!(out.contains(". semaphore (__dlock_key , 2)"), "{out}");
    }
}
