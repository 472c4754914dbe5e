//! (docs follow)

mod args;
mod expand;
mod key;

use proc_macro::TokenStream;

/// Runs the body of an `async fn` while holding a distributed lock.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match expand::expand(attr.into(), item.clone()) {
        Ok(out) => out.into(),
        Err(err) => {
            // Emit the item unchanged beside the error (tokio's approach): the function still
            // exists, so its callers do not add a cascade of "cannot find function" errors.
            // Parameters used only by the rejected key would now look unused; rustc's advice
            // to rename them `_id` would break the key, so that one lint is silenced.
            let mut out = err.into_compile_error();
            if syn::parse2::<syn::ItemFn>(item.clone()).is_ok() {
                out.extend(quote::quote!(#[allow(unused_variables)]));
            }
            out.extend(item);
            out.into()
        }
    }
}
