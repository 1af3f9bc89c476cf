//! The attribute macro of `sbs-harness`: `#[sbs_harness::capture]` on a function or a
//! method of an application.
//!
//! The function keeps its body. In front of the body the expansion adds:
//!
//! - a check of one relaxed atomic load: is this process capturing? When it is not (every
//!   run but `sbs-profile capture`'s), nothing else happens;
//! - when it is: the arguments (and `self`) serialized with serde for the calls a
//!   reservoir keeps, and a guard whose drop, when the body ends, reads the allocation
//!   agent's counters again (the call's in-situ cost);
//! - a registration (a `static` the linker gathers into a slice of `sbs-harness`, as
//!   `sbs-divan` registers benchmarks) naming the function's path, its signature and a
//!   replay function, which under `sbs-profile --replay` turns the captured calls into a
//!   harness benchmark: deserialized in its set-up, `&mut` and by-value arguments cloned
//!   from a pristine copy before every operation (the reset), the result to `black_box`;
//! - an entry of `.init_array` that lets the runtime see, before `main`, whether the
//!   process is to capture or to replay.
//!
//! Generic functions are refused (name a non-generic wrapper with the types you run); on
//! a method, the attribute cannot see its impl, so it is told the type:
//! `#[sbs_harness::capture(self_type = Stats)]`.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{FnArg, GenericParam, Ident, ItemFn, Pat, Path, ReturnType, Token, Type};

/// The attribute's options: `self_type = TYPE`, `crate = PATH`.
#[derive(Default)]
struct Opts {
    self_type: Option<Type>,
    krate: Option<Path>,
}

impl Parse for Opts {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut opts = Opts::default();
        while !input.is_empty() {
            let (key, span) = if input.peek(Token![crate]) {
                let kw: Token![crate] = input.parse()?;
                ("crate".to_string(), kw.span)
            } else {
                let ident = Ident::parse_any(input)?;
                (ident.to_string(), ident.span())
            };
            input.parse::<Token![=]>()?;
            match key.as_str() {
                "self_type" => opts.self_type = Some(input.parse()?),
                "crate" => opts.krate = Some(input.parse()?),
                other => {
                    return Err(syn::Error::new(
                        span,
                        format!(
                            "unknown option `{other}` of #[sbs_harness::capture]; it takes \
                             `self_type = TYPE` (on a method) and `crate = PATH`"
                        ),
                    ))
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(opts)
    }
}

/// How an argument is passed, and so how a replay rebuilds it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `&T`: the pristine value, borrowed.
    Ref,
    /// `&str`: a stored `String`, borrowed.
    RefStr,
    /// `&[T]`: a stored `Vec<T>`, borrowed.
    RefSlice,
    /// `&mut T`: a clone before every operation.
    Mut,
    /// `&mut [T]`: a cloned `Vec<T>`.
    MutSlice,
    /// `T`: a clone before every operation, moved into the call.
    Value,
}

impl Kind {
    fn resets(self) -> bool {
        matches!(self, Kind::Mut | Kind::MutSlice | Kind::Value)
    }
}

/// One argument (or `self`).
struct Arg {
    /// The name the body sees (`self` for the receiver).
    name: Tokens,
    /// The type stored in a capture.
    stored: Type,
    kind: Kind,
    span: Span,
}

/// The stored type and kind of an argument of type `ty`.
fn classify(ty: &Type) -> syn::Result<(Type, Kind)> {
    match ty {
        Type::Reference(r) => {
            let elem = &*r.elem;
            let is_str =
                matches!(elem, Type::Path(p) if p.qself.is_none() && p.path.is_ident("str"));
            match (r.mutability.is_some(), elem) {
                (false, _) if is_str => {
                    Ok((syn::parse_quote!(::std::string::String), Kind::RefStr))
                }
                (false, Type::Slice(s)) => {
                    let t = &s.elem;
                    Ok((syn::parse_quote!(::std::vec::Vec<#t>), Kind::RefSlice))
                }
                (false, _) => Ok((elem.clone(), Kind::Ref)),
                (true, _) if is_str => Err(syn::Error::new(
                    ty.span(),
                    "an `&mut str` argument cannot be captured; take `&mut String`",
                )),
                (true, Type::Slice(s)) => {
                    let t = &s.elem;
                    Ok((syn::parse_quote!(::std::vec::Vec<#t>), Kind::MutSlice))
                }
                (true, _) => Ok((elem.clone(), Kind::Mut)),
            }
        }
        Type::ImplTrait(_) => Err(syn::Error::new(
            ty.span(),
            "an `impl Trait` argument cannot be captured (its type has no name to rebuild it \
             with); take a concrete type",
        )),
        Type::Paren(p) => classify(&p.elem),
        _ => Ok((ty.clone(), Kind::Value)),
    }
}

/// Whether a return type may borrow (a reference, a lifetime, `impl Trait`, `Self`): its
/// replay then drops it inside the measured region.
fn may_borrow(ret: &ReturnType) -> bool {
    let ReturnType::Type(_, ty) = ret else {
        return false;
    };
    let text = quote!(#ty).to_string();
    text.contains('&') || text.contains('\'') || text.contains("impl ") || text.contains("dyn ")
}

/// `#[sbs_harness::capture]`: record this function's calls under `sbs-profile capture`,
/// replay them as a benchmark under `sbs-profile --replay`. See the crate's documentation.
#[proc_macro_attribute]
pub fn capture(attr: TokenStream, item: TokenStream) -> TokenStream {
    let opts = match syn::parse::<Opts>(attr) {
        Ok(o) => o,
        Err(e) => return e.to_compile_error().into(),
    };
    let func = match syn::parse::<ItemFn>(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let mut out: Tokens = syn::Error::new(
                e.span(),
                "#[sbs_harness::capture] goes on a function or a method",
            )
            .to_compile_error();
            out.extend(Tokens::from(item));
            return out.into();
        }
    };
    match expand(opts, func.clone()) {
        Ok(t) => t.into(),
        Err(e) => {
            // The function stays, so the error is the only one.
            let mut out = e.to_compile_error();
            out.extend(quote!(#func));
            out.into()
        }
    }
}

fn expand(opts: Opts, func: ItemFn) -> syn::Result<Tokens> {
    let sig = &func.sig;
    let name = &sig.ident;
    if let Some(a) = &sig.asyncness {
        return Err(syn::Error::new(
            a.span(),
            "an async fn cannot be captured: its call returns before its work is done; mark \
             the synchronous function it awaits",
        ));
    }
    if let Some(c) = &sig.constness {
        return Err(syn::Error::new(c.span(), "a const fn cannot be captured"));
    }
    if let Some(u) = &sig.unsafety {
        return Err(syn::Error::new(
            u.span(),
            "an unsafe fn cannot be captured: its replay could not know its safety conditions",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new(
            v.span(),
            "a variadic fn cannot be captured",
        ));
    }
    if let Some(g) = sig
        .generics
        .params
        .iter()
        .find(|g| !matches!(g, GenericParam::Lifetime(_)))
    {
        return Err(syn::Error::new(
            g.span(),
            format!(
                "`{name}` is generic: a capture must know the concrete types to rebuild its \
                 arguments; mark a non-generic function that calls it with the types your \
                 application uses (e.g. a `fn {name}_u64` that calls `{name}::<u64>`)"
            ),
        ));
    }
    let krate: Path = opts
        .krate
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::sbs_harness));
    let private = quote!(#krate::capture::__private);

    let mut args: Vec<Arg> = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                let Some(self_ty) = &opts.self_type else {
                    return Err(syn::Error::new(
                        r.span(),
                        format!(
                            "on a method, name its type: #[sbs_harness::capture(self_type = \
                             TYPE)] (the attribute sees `{name}` alone, not its impl block)"
                        ),
                    ));
                };
                if r.colon_token.is_some() {
                    return Err(syn::Error::new(
                        r.span(),
                        "a `self: TYPE` receiver cannot be captured; take `self`, `&self` or \
                         `&mut self`",
                    ));
                }
                let kind = match (&r.reference, r.mutability.is_some()) {
                    (Some(_), false) => Kind::Ref,
                    (Some(_), true) => Kind::Mut,
                    (None, _) => Kind::Value,
                };
                args.push(Arg {
                    name: quote!(self),
                    stored: self_ty.clone(),
                    kind,
                    span: r.span(),
                });
            }
            FnArg::Typed(t) => {
                let Pat::Ident(pi) = &*t.pat else {
                    return Err(syn::Error::new(
                        t.pat.span(),
                        "a captured function's arguments need plain names (destructure in \
                         the body)",
                    ));
                };
                let (stored, kind) = classify(&t.ty)?;
                let ident = &pi.ident;
                args.push(Arg {
                    name: quote!(#ident),
                    stored,
                    kind,
                    span: t.ty.span(),
                });
            }
        }
    }
    if args.len() > 16 {
        return Err(syn::Error::new(
            sig.inputs.span(),
            "a captured function takes at most 16 arguments",
        ));
    }

    // The path the benchmark is named by, and the signature a capture is checked against.
    let path_tail = match &opts.self_type {
        Some(t) => {
            let t = quote!(#t).to_string().replace(' ', "");
            format!("{t}::{name}")
        }
        None => name.to_string(),
    };
    let signature = {
        let inputs = &sig.inputs;
        let output = &sig.output;
        let mut s = quote!(fn(#inputs) #output).to_string();
        if let Some(t) = &opts.self_type {
            s = format!("{} [self: {}]", s, quote!(#t));
        }
        s
    };

    // Capture: the arguments written one by one, `self` first.
    let writes = args.iter().map(|a| {
        let n = &a.name;
        quote_spanned!(a.span=> __sbs_w.arg(&#n);)
    });

    // Replay.
    let stored: Vec<&Type> = args.iter().map(|a| &a.stored).collect();
    let checks = args.iter().map(|a| {
        let t = &a.stored;
        let clone = if a.kind.resets() {
            quote_spanned!(a.span=> #private::resettable::<#t>();)
        } else {
            quote!()
        };
        quote_spanned!(a.span=> #private::capturable::<#t>(); #clone)
    });
    let resets = args.iter().any(|a| a.kind.resets());
    let indices: Vec<syn::Index> = (0..args.len()).map(syn::Index::from).collect();
    // Arguments of the call: borrowed from the pristine tuple `__p`, or from the clones.
    let mut mut_tys = Vec::new();
    let mut mut_src = Vec::new();
    let mut mut_names = Vec::new();
    let mut val_tys = Vec::new();
    let mut val_src = Vec::new();
    let mut val_names = Vec::new();
    let mut call_args = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let idx = &indices[i];
        let t = &a.stored;
        let arg = match a.kind {
            Kind::Ref => quote!(#krate::black_box(&__p.#idx)),
            Kind::RefStr => quote!(#krate::black_box(__p.#idx.as_str())),
            Kind::RefSlice => quote!(#krate::black_box(__p.#idx.as_slice())),
            Kind::Mut | Kind::MutSlice => {
                let m = format_ident!("__sbs_m{}", mut_names.len());
                mut_tys.push(t.clone());
                mut_src.push(quote!(__s.pristine[__s.next].#idx.clone()));
                mut_names.push(m.clone());
                if a.kind == Kind::Mut {
                    quote!(#krate::black_box(&mut #m))
                } else {
                    quote!(#krate::black_box(#m.as_mut_slice()))
                }
            }
            Kind::Value => {
                let v = format_ident!("__sbs_v{}", val_names.len());
                val_tys.push(t.clone());
                val_src.push(quote!(__s.pristine[__s.next].#idx.clone()));
                val_names.push(v.clone());
                quote!(#krate::black_box(#v))
            }
        };
        call_args.push(arg);
    }
    let callee = match &opts.self_type {
        Some(t) => quote!(<#t>::#name),
        None => quote!(#name),
    };
    let call = quote!(#callee(#(#call_args),*));
    let borrows = may_borrow(&sig.output);
    let finish = if borrows {
        quote!(#krate::black_box(&__r); drop(__r);)
    } else {
        quote!(__r)
    };
    let replay_body = if resets {
        quote! {
            struct __State {
                pristine: ::std::vec::Vec<__Args>,
                muts: ::std::option::Option<(#(#mut_tys,)*)>,
                vals: ::std::option::Option<(#(#val_tys,)*)>,
                spent: ::std::option::Option<(#(#mut_tys,)*)>,
                next: usize,
                cursor: #private::Cursor,
            }
            fn __fill(__s: &mut __State) {
                __s.muts = ::std::option::Option::Some((#(#mut_src,)*));
                __s.vals = ::std::option::Option::Some((#(#val_src,)*));
            }
            __suite
                .bench(__name, move |_| {
                    let mut __s = __State {
                        pristine: #private::decode(&__calls).expect("checked before the set-up"),
                        muts: ::std::option::Option::None,
                        vals: ::std::option::Option::None,
                        spent: ::std::option::Option::None,
                        next: 0,
                        cursor: #private::Cursor::new(),
                    };
                    __s.next = __s.cursor.next(__s.pristine.len());
                    __fill(&mut __s);
                    __s
                })
                .reset(|__s: &mut __State| {
                    // The last operation's mutated arguments are dropped here, outside
                    // the measured region, and fresh clones made for the next one.
                    drop(__s.spent.take());
                    __s.next = __s.cursor.next(__s.pristine.len());
                    __fill(__s);
                })
                .run(|__s: &mut __State| {
                    let __i = __s.next;
                    #[allow(unused_mut, unused_variables)]
                    let (#(mut #mut_names,)*) = __s.muts.take().expect("filled by the reset");
                    #[allow(unused_variables)]
                    let (#(#val_names,)*) = __s.vals.take().expect("filled by the reset");
                    #[allow(unused_variables)]
                    let __p = &__s.pristine[__i];
                    let __r = #call;
                    __s.spent = ::std::option::Option::Some((#(#mut_names,)*));
                    #finish
                });
        }
    } else {
        quote! {
            __suite
                .bench(__name, move |_| {
                    let __pristine: ::std::vec::Vec<__Args> =
                        #private::decode(&__calls).expect("checked before the set-up");
                    (__pristine, #private::Cursor::new())
                })
                .run(|__s: &mut (::std::vec::Vec<__Args>, #private::Cursor)| {
                    let __i = __s.1.next(__s.0.len());
                    #[allow(unused_variables)]
                    let __p = &__s.0[__i];
                    let __r = #call;
                    #finish
                });
        }
    };

    let attrs = &func.attrs;
    let vis = &func.vis;
    let stmts = &func.block.stmts;
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #[#private::distributed_slice(#private::ENTRIES)]
            #[linkme(crate = #private::linkme)]
            static __SBS_CAPTURE_ENTRY: #private::Entry = #private::Entry {
                path: ::std::concat!(::std::module_path!(), "::", #path_tail),
                signature: #signature,
                site: &__SBS_CAPTURE_SITE,
                replay: __sbs_replay,
            };
            static __SBS_CAPTURE_SITE: #private::Site = #private::Site::new();
            // Before `main`: capture, replay, or neither (see `sbs_harness::capture`).
            #[used]
            #[link_section = ".init_array"]
            static __SBS_CAPTURE_INIT: #private::Init = #private::startup;

            #[allow(clippy::let_unit_value, clippy::unit_arg, clippy::needless_borrow)]
            fn __sbs_replay(
                __suite: &mut #krate::Suite,
                __name: &str,
                __calls: ::std::vec::Vec<#private::Value>,
            ) -> ::std::result::Result<(), ::std::string::String> {
                type __Args = (#(#stored,)*);
                #(#checks)*
                // Every call must deserialize before anything runs.
                #private::decode::<__Args>(&__calls)?;
                #replay_body
                ::std::result::Result::Ok(())
            }

            #[allow(unused_variables)]
            let __sbs_capture_guard = if #private::capturing() {
                #private::begin(&__SBS_CAPTURE_ENTRY, |__sbs_w: &mut #private::ArgWriter| {
                    #(#writes)*
                })
            } else {
                ::std::option::Option::None
            };
            #(#stmts)*
        }
    })
}
