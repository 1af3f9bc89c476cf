//! The attribute macros of `sbs-divan`, divan's API on top of `sbs-harness`:
//! `#[divan::bench]` on a function and `#[divan::bench_group]` on a module.
//!
//! Each leaves the item as it is and adds one `static` next to it, which the linker
//! gathers into a slice of the `sbs-divan` crate (`linkme`); `divan::main()` reads that
//! slice. A benchmark's static names its module path, its name, its options, and a
//! function that lists its instances (one per type of `types`, constant of `consts` and
//! value of `args`), each with the closure that runs it.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, FnArg, GenericParam, Ident, ItemFn, ItemMod, Path, Token, Type};

/// The most constants a `consts = EXPR` option that is not an array literal can hold.
const MAX_CONSTS: usize = 16;

/// One option's value.
enum Value {
    /// `ignore`, with no value.
    Flag,
    /// `key = EXPR`.
    Expr(Expr),
    /// `types = [T, U]`.
    Types(Vec<Type>),
    /// `crate = path::to::divan`.
    Path(Path),
}

/// One `key` or `key = value` of the attribute.
struct Opt {
    key: String,
    span: Span,
    value: Value,
}

/// The attribute's options, in order.
struct Opts(Vec<Opt>);

impl Parse for Opt {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let (key, span) = if input.peek(Token![crate]) {
            let kw: Token![crate] = input.parse()?;
            ("crate".to_string(), kw.span)
        } else {
            let ident = Ident::parse_any(input)?;
            (ident.to_string(), ident.span())
        };
        if !input.peek(Token![=]) {
            return Ok(Opt {
                key,
                span,
                value: Value::Flag,
            });
        }
        input.parse::<Token![=]>()?;
        let value = match key.as_str() {
            "types" => {
                let content;
                syn::bracketed!(content in input);
                let types = Punctuated::<Type, Token![,]>::parse_terminated(&content)?;
                Value::Types(types.into_iter().collect())
            }
            "crate" => Value::Path(input.parse()?),
            _ => Value::Expr(input.parse()?),
        };
        Ok(Opt { key, span, value })
    }
}

impl Parse for Opts {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let opts = Punctuated::<Opt, Token![,]>::parse_terminated(input)?;
        Ok(Opts(opts.into_iter().collect()))
    }
}

/// The options both attributes take (divan's names), and what becomes of them.
const SHARED: &[&str] = &[
    "name",
    "crate",
    "sample_count",
    "sample_size",
    "min_time",
    "max_time",
    "ignore",
    "threads",
    "counters",
    "bytes_count",
    "chars_count",
    "items_count",
    "skip_ext_time",
];

/// What the attribute's options say, checked.
#[derive(Default)]
struct Parsed {
    krate: Option<Path>,
    name: Option<Expr>,
    args: Option<Expr>,
    consts: Option<Expr>,
    types: Option<Vec<Type>>,
    sample_count: Option<Expr>,
    sample_size: Option<Expr>,
    min_time: Option<Expr>,
    max_time: Option<Expr>,
    ignore: Option<Tokens>,
}

fn expr(opt: Opt) -> syn::Result<Expr> {
    match opt.value {
        Value::Expr(e) => Ok(e),
        _ => Err(syn::Error::new(
            opt.span,
            format!("`{}` needs a value: `{} = ...`", opt.key, opt.key),
        )),
    }
}

fn check(opts: Opts, bench: bool) -> syn::Result<Parsed> {
    let mut p = Parsed::default();
    let mut seen: Vec<String> = Vec::new();
    for opt in opts.0 {
        if seen.contains(&opt.key) {
            return Err(syn::Error::new(
                opt.span,
                format!("`{}` is given twice", opt.key),
            ));
        }
        seen.push(opt.key.clone());
        let bench_only = ["args", "consts", "types"].contains(&opt.key.as_str());
        let known = SHARED.contains(&opt.key.as_str()) || (bench && bench_only);
        if !known {
            return Err(syn::Error::new(
                opt.span,
                format!(
                    "unknown option `{}`; sbs-divan accepts {}{}",
                    opt.key,
                    if bench { "args, consts, types, " } else { "" },
                    SHARED.join(", ")
                ),
            ));
        }
        match opt.key.as_str() {
            "crate" => match opt.value {
                Value::Path(path) => p.krate = Some(path),
                _ => return Err(syn::Error::new(opt.span, "write `crate = path::to::divan`")),
            },
            "types" => match opt.value {
                Value::Types(t) => p.types = Some(t),
                _ => return Err(syn::Error::new(opt.span, "write `types = [T, U, ...]`")),
            },
            "ignore" => {
                p.ignore = Some(match opt.value {
                    Value::Flag => quote!(true),
                    Value::Expr(e) => e.into_token_stream(),
                    _ => {
                        return Err(syn::Error::new(
                            opt.span,
                            "write `ignore` or `ignore = BOOL`",
                        ))
                    }
                })
            }
            "name" => p.name = Some(expr(opt)?),
            "args" => p.args = Some(expr(opt)?),
            "consts" => p.consts = Some(expr(opt)?),
            "sample_count" => p.sample_count = Some(expr(opt)?),
            "sample_size" => p.sample_size = Some(expr(opt)?),
            "min_time" => p.min_time = Some(expr(opt)?),
            "max_time" => p.max_time = Some(expr(opt)?),
            // Accepted: see the crate's documentation for what is not honoured.
            _ => {
                expr(opt)?;
            }
        }
    }
    Ok(p)
}

/// `Option<T>` tokens of an optional expression, through `conv`.
fn some(e: &Option<Expr>, conv: impl Fn(&Expr) -> Tokens) -> Tokens {
    match e {
        Some(e) => {
            let v = conv(e);
            quote!(::core::option::Option::Some(#v))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// The function that returns the options of a benchmark or group.
fn options_fn(p: &Parsed, krate: &Path) -> Tokens {
    let sample_count = some(&p.sample_count, |e| quote!(#e));
    let sample_size = some(&p.sample_size, |e| quote!(#e));
    let min_time = some(
        &p.min_time,
        |e| quote!(#krate::__private::IntoDuration::into_duration(#e)),
    );
    let max_time = some(
        &p.max_time,
        |e| quote!(#krate::__private::IntoDuration::into_duration(#e)),
    );
    let ignore = match &p.ignore {
        Some(t) => quote!(::core::option::Option::Some(#t)),
        None => quote!(::core::option::Option::None),
    };
    quote! {
        fn __sbs_divan_options() -> #krate::__private::Options {
            #krate::__private::Options {
                sample_count: #sample_count,
                sample_size: #sample_size,
                min_time: #min_time,
                max_time: #max_time,
                ignore: #ignore,
            }
        }
    }
}

fn cfg_attrs(attrs: &[Attribute]) -> Vec<&Attribute> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
        .collect()
}

fn default_crate() -> Path {
    syn::parse_quote!(::divan)
}

fn unraw(ident: &Ident) -> String {
    ident.unraw().to_string()
}

/// A benchmark: `#[divan::bench]` or `#[divan::bench(OPTIONS)]` on a function that takes
/// nothing, a `divan::Bencher`, an argument of `args`, or a `Bencher` and an argument.
#[proc_macro_attribute]
pub fn bench(attr: TokenStream, item: TokenStream) -> TokenStream {
    let opts = syn::parse_macro_input!(attr as Opts);
    let func = syn::parse_macro_input!(item as ItemFn);
    match bench_impl(opts, &func) {
        Ok(extra) => quote!(#func #extra).into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#func #e).into()
        }
    }
}

/// How the function is called: with a `Bencher` or not, with an argument or not.
struct Shape {
    bencher: bool,
    arg: bool,
}

fn shape(func: &ItemFn, args: bool) -> syn::Result<Shape> {
    let n = func.sig.inputs.len();
    if let Some(FnArg::Receiver(r)) = func.sig.inputs.first() {
        return Err(syn::Error::new(r.span(), "a benchmark cannot take `self`"));
    }
    match (args, n) {
        (false, 0) => Ok(Shape {
            bencher: false,
            arg: false,
        }),
        (false, 1) => Ok(Shape {
            bencher: true,
            arg: false,
        }),
        (true, 1) => Ok(Shape {
            bencher: false,
            arg: true,
        }),
        (true, 2) => Ok(Shape {
            bencher: true,
            arg: true,
        }),
        (false, _) => Err(syn::Error::new(
            func.sig.inputs.span(),
            "a benchmark without `args` takes nothing or a `divan::Bencher`",
        )),
        (true, _) => Err(syn::Error::new(
            func.sig.span(),
            "a benchmark with `args` takes the argument, or a `divan::Bencher` and the argument",
        )),
    }
}

/// The constants of `consts`: each element of an array literal, or the first
/// `MAX_CONSTS` of another expression (`consts = SIZES`), with the condition under which
/// the index exists.
fn const_exprs(consts: &Expr, krate: &Path) -> Vec<(Tokens, Tokens)> {
    if let Expr::Array(array) = consts {
        return array
            .elems
            .iter()
            .map(|e| (quote!(#e), quote!(true)))
            .collect();
    }
    (0..MAX_CONSTS)
        .map(|i| {
            (
                quote!(#krate::__private::const_at(&#consts, #i)),
                quote!(#i < #krate::__private::const_len(&#consts)),
            )
        })
        .collect()
}

/// The turbofish `::<T, {C}>` for one instance, following the declared order.
fn turbofish(func: &ItemFn, ty: Option<&Type>, cst: Option<&Tokens>) -> syn::Result<Tokens> {
    let mut parts = Vec::new();
    for param in &func.sig.generics.params {
        match param {
            GenericParam::Lifetime(_) => {}
            GenericParam::Type(t) => match ty {
                Some(ty) => parts.push(quote!(#ty)),
                None => {
                    return Err(syn::Error::new(
                        t.span(),
                        "a generic benchmark needs `types = [...]`",
                    ))
                }
            },
            GenericParam::Const(c) => match cst {
                Some(cst) => parts.push(quote!({ #cst })),
                None => {
                    return Err(syn::Error::new(
                        c.span(),
                        "a benchmark generic over a constant needs `consts = [...]`",
                    ))
                }
            },
        }
    }
    Ok(if parts.is_empty() {
        quote!()
    } else {
        quote!(::<#(#parts),*>)
    })
}

/// The statements that add one instance (or one per argument) to `__out`.
fn instance(
    func: &ItemFn,
    shape: &Shape,
    krate: &Path,
    ty: Option<&Type>,
    cst: Option<&Tokens>,
) -> syn::Result<Tokens> {
    let ident = &func.sig.ident;
    let fish = turbofish(func, ty, cst)?;
    let mut suffix = Vec::new();
    if let Some(ty) = ty {
        suffix.push(quote!(#krate::__private::type_name::<#ty>()));
    }
    if let Some(cst) = cst {
        suffix.push(quote!(::std::string::ToString::to_string(&#cst)));
    }
    let get = quote!(#krate::__private::ToArg::get(__arg));
    let call = match (shape.bencher, shape.arg) {
        (false, false) => quote!(__b.bench(|| #ident #fish ())),
        (true, false) => quote!({ #ident #fish (__b); }),
        (false, true) => quote!(__b.bench(|| #ident #fish (#get))),
        (true, true) => quote!({ #ident #fish (__b, #get); }),
    };
    Ok(if shape.arg {
        quote! {
            for (__arg, __name) in __args.iter().zip(&__names) {
                let mut __suffix: ::std::vec::Vec<::std::string::String> = ::std::vec![#(#suffix),*];
                __suffix.push(::std::clone::Clone::clone(__name));
                __out.add(__suffix, move |__b| #call);
            }
        }
    } else {
        quote! {
            __out.add(::std::vec![#(#suffix),*], move |__b| #call);
        }
    })
}

fn bench_impl(opts: Opts, func: &ItemFn) -> syn::Result<Tokens> {
    let p = check(opts, true)?;
    let krate = p.krate.clone().unwrap_or_else(default_crate);
    let shape = shape(func, p.args.is_some())?;
    let types: Vec<Option<&Type>> = match &p.types {
        Some(t) => t.iter().map(Some).collect(),
        None => vec![None],
    };
    let consts: Vec<Option<(Tokens, Tokens)>> = match &p.consts {
        Some(c) => const_exprs(c, &krate).into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut body = Vec::new();
    for ty in &types {
        for cst in &consts {
            let add = instance(func, &shape, &krate, *ty, cst.as_ref().map(|c| &c.0))?;
            body.push(match cst {
                Some((_, cond)) => quote!(if #cond { #add }),
                None => add,
            });
        }
    }
    let args = p.args.as_ref().map(|args| {
        quote_spanned! {args.span()=>
            let __args = #krate::__private::leak_args(#args);
            let __names: ::std::vec::Vec<::std::string::String> = __args
                .iter()
                .map(|__a| {
                    #[allow(unused_imports)]
                    use #krate::__private::{NameByDebug as _, NameByDisplay as _};
                    (&&#krate::__private::Named(__a)).arg_name()
                })
                .collect();
        }
    });
    let name = match &p.name {
        Some(e) => quote!(#e),
        None => unraw(&func.sig.ident).into_token_stream(),
    };
    let options = options_fn(&p, &krate);
    let cfgs = cfg_attrs(&func.attrs);
    let too_many = match &p.consts {
        Some(c) if !matches!(c, Expr::Array(_)) => {
            let message = format!(
                "sbs-divan takes at most {MAX_CONSTS} constants from a named array; \
                 write them as an array literal, `consts = [...]`"
            );
            quote!(
                const _: () = ::core::assert!(
                    #krate::__private::const_len(&#c) <= #MAX_CONSTS, #message
                );
            )
        }
        _ => quote!(),
    };
    Ok(quote! {
        #(#cfgs)*
        const _: () = {
            #too_many
            #[#krate::__private::distributed_slice(#krate::__private::BENCHES)]
            #[linkme(crate = #krate::__private::linkme)]
            static __SBS_DIVAN_BENCH: #krate::__private::BenchEntry = #krate::__private::BenchEntry {
                module_path: ::std::module_path!(),
                name: #name,
                line: ::std::line!(),
                options: __sbs_divan_options,
                instances: __sbs_divan_instances,
            };
            #options
            fn __sbs_divan_instances(__out: &mut #krate::__private::Instances) {
                #args
                #(#body)*
            }
        };
    })
}

/// Options for every benchmark of a module: `#[divan::bench_group]` or
/// `#[divan::bench_group(OPTIONS)]` on `mod NAME`. `name = "..."` replaces the module's
/// name in the benchmarks' paths.
#[proc_macro_attribute]
pub fn bench_group(attr: TokenStream, item: TokenStream) -> TokenStream {
    let opts = syn::parse_macro_input!(attr as Opts);
    let module = syn::parse_macro_input!(item as ItemMod);
    match group_impl(opts, &module) {
        Ok(extra) => quote!(#module #extra).into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#module #e).into()
        }
    }
}

fn group_impl(opts: Opts, module: &ItemMod) -> syn::Result<Tokens> {
    let p = check(opts, false)?;
    let krate = p.krate.clone().unwrap_or_else(default_crate);
    let raw = unraw(&module.ident);
    let name = match &p.name {
        Some(e) => quote!(::core::option::Option::Some(#e)),
        None => quote!(::core::option::Option::None),
    };
    let options = options_fn(&p, &krate);
    let cfgs = cfg_attrs(&module.attrs);
    Ok(quote! {
        #(#cfgs)*
        const _: () = {
            #[#krate::__private::distributed_slice(#krate::__private::GROUPS)]
            #[linkme(crate = #krate::__private::linkme)]
            static __SBS_DIVAN_GROUP: #krate::__private::GroupEntry = #krate::__private::GroupEntry {
                module_path: ::std::concat!(::std::module_path!(), "::", #raw),
                name: #name,
                options: __sbs_divan_options,
            };
            #options
        };
    })
}
