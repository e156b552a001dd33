//! Stage 1: tokens → a syntax tree of the DSL. Every node keeps the tokens it came from, so later
//! stages can put errors on exactly what the user wrote.
//!
//! ```text
//! graph! {
//!     /// docs
//!     #[compute(f32)] #[intermediate(f32)] #[fuse(single)]
//!     pub Name<const M: usize, dyn B>(a: bf16[B, M, 64], ...) -> (y: bf16[B, M, 64], ...) {
//!         let c = matmul(a, b);
//!         let (p, q) = some_multi_output_op(c);
//!         y = relu(add(c, 0.5), upper_clip = 6.0);
//!     }
//! }
//! ```

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{bracketed, parenthesized, token, Attribute, Ident, LitFloat, LitInt, LitStr, Meta, Token, Visibility};

/// Every graph of one `graph!` invocation.
pub struct Input {
    /// The graphs, in order.
    pub graphs: Vec<GraphDef>,
}

/// One graph declaration.
pub struct GraphDef {
    /// Doc comments and other attributes passed through to the type.
    pub docs: Vec<Attribute>,
    /// `#[compute(f32)]`, `#[intermediate(f32)]`.
    pub settings: Vec<(Ident, Ident)>,
    /// Every `#[fuse(..)]`, as written (the checker resolves the mode and reports misuse).
    pub fuse: Vec<FuseDecl>,
    /// The type's visibility.
    pub vis: Visibility,
    /// The graph's (and the generated type's) name.
    pub name: Ident,
    /// Its dim parameters, in order.
    pub params: Vec<DimParam>,
    /// Its input ports.
    pub inputs: Vec<PortDecl>,
    /// Its output ports.
    pub outputs: Vec<PortDecl>,
    /// The statements of its body.
    pub body: Vec<Stmt>,
}

/// A `#[fuse(..)]` attribute: how many kernels the graph may become.
pub struct FuseDecl {
    /// The attribute's tokens, `#[fuse(..)]` whole, for errors about the attribute itself.
    pub attr: Attribute,
    /// Its argument.
    pub arg: FuseArg,
}

/// The argument of a `#[fuse(..)]`, as written: anything but one bare name is kept with its
/// tokens, so the checker can say on them what to write instead.
pub enum FuseArg {
    /// `single`, `auto`, or another name.
    Mode(Ident),
    /// `"single"`: a string where a bare name is expected.
    Str(LitStr),
    /// `#[fuse]` or `#[fuse()]`.
    Missing,
    /// Anything else (`#[fuse = single]`, `#[fuse(single, auto)]`, `#[fuse(1)]`): the tokens at
    /// fault.
    Other(TokenStream),
}

impl FuseDecl {
    /// Reads an attribute whose path is `fuse`; never fails (misuse is the checker's to report).
    fn new(attr: Attribute) -> Self {
        let arg = match &attr.meta {
            Meta::Path(_) => FuseArg::Missing,
            Meta::NameValue(nv) => FuseArg::Other(quote::quote!(#nv)),
            Meta::List(list) if list.tokens.is_empty() => FuseArg::Missing,
            Meta::List(list) => {
                if let Ok(mode) = list.parse_args_with(Ident::parse_any) {
                    FuseArg::Mode(mode)
                } else if let Ok(s) = list.parse_args::<LitStr>() {
                    FuseArg::Str(s)
                } else {
                    FuseArg::Other(list.tokens.clone())
                }
            }
        };
        FuseDecl { attr, arg }
    }
}

/// `const M: usize` (checked at compile time) or `dyn B` (bound at run time), the latter
/// optionally with its range and classes (`dyn S: 1..=8192 pow2`).
pub struct DimParam {
    /// The parameter's name.
    pub name: Ident,
    /// `dyn B`: bound at run time.
    pub runtime: bool,
    /// The type written after `const M:`, which must be `usize`.
    pub ty: Option<syn::Type>,
    /// What follows `dyn S:`, if anything.
    pub class: Option<ClassDecl>,
}

/// A `dyn` dim's declared values: `1..=8192` (every value its own class), `1..=8192 pow2`,
/// `64..=8192 multiple(64)`, `1..=8192 exact`, or a list of class ends `[128, 512, 2048]`
/// (the range `1..=2048`).
pub struct ClassDecl {
    /// `min..=max`, absent for a list alone.
    pub range: Option<(LitInt, LitInt)>,
    /// How the range is grouped.
    pub buckets: BucketsDecl,
}

/// The grouping after a `dyn` dim's range.
pub enum BucketsDecl {
    /// Nothing, or `exact`: every value its own class.
    Exact,
    /// `pow2`.
    Pow2,
    /// `multiple(64)`.
    Multiple(LitInt),
    /// `[128, 512, 2048]`, with the span of its brackets.
    List(Vec<LitInt>, Span),
}

impl Parse for ClassDecl {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(token::Bracket) {
            let content;
            let brackets = bracketed!(content in input);
            let ends = Punctuated::<LitInt, Token![,]>::parse_terminated(&content)?.into_iter().collect();
            return Ok(ClassDecl { range: None, buckets: BucketsDecl::List(ends, brackets.span.join()) });
        }
        let min: LitInt = input.parse()?;
        input.parse::<Token![..=]>()?;
        let max: LitInt = input.parse()?;
        if !input.peek(Ident) {
            return Ok(ClassDecl { range: Some((min, max)), buckets: BucketsDecl::Exact });
        }
        let word: Ident = input.parse()?;
        let buckets = match word.to_string().as_str() {
            "pow2" => BucketsDecl::Pow2,
            "exact" => BucketsDecl::Exact,
            "multiple" => {
                let content;
                parenthesized!(content in input);
                BucketsDecl::Multiple(content.parse()?)
            }
            _ => {
                let msg = format!(
                    "unknown classes `{word}`: write `pow2`, `multiple(N)`, `exact` or nothing after the range"
                );
                return Err(syn::Error::new(word.span(), msg));
            }
        };
        Ok(ClassDecl { range: Some((min, max)), buckets })
    }
}

/// `a: bf16[1, M, K]` (packed row-major, the default of every port), optionally with a layout:
/// `q: bf16[B, H, S, D] order [0, 2, 1, 3]` (the memory order of the dims, outermost first: here
/// BSHD storage of a logical BHSD tensor) or `x: f16[N, C, H, W] channels_last` (NHWC storage,
/// `order [0, 2, 3, 1]`).
pub struct PortDecl {
    /// The port's name.
    pub name: Ident,
    /// The dtype token (`bf16`).
    pub dtype: Ident,
    /// The dims, as written.
    pub dims: Vec<DimExpr>,
    /// The span of the dims' brackets.
    pub bracket: Span,
    /// The declared layout, if any.
    pub layout: Option<LayoutDecl>,
}

/// A port's declared memory layout, or `host`: the port is a host scalar (a by-value scalar
/// supplied at execute, `eps: f32[1, 1] host`).
pub enum LayoutDecl {
    /// `order [0, 2, 1, 3]`: the tokens of the list and the span of its brackets.
    Order(Vec<LitInt>, Span),
    /// `channels_last`: the keyword's span.
    ChannelsLast(Span),
    /// `host`: the keyword's span.
    Host(Span),
}

/// A dim as written, in a port's dims or in a list attribute: a literal, a dim parameter, or an
/// expression over them with `+`, `-`, `*`, `/` (floor division by a constant) and parentheses
/// (`HQ * D`, `(H + 1) / 2`). Its tokens are kept (see its `ToTokens`), so errors cover exactly
/// what was written.
pub enum DimExpr {
    /// `64`, or `-1` (a list of integers may hold negative ones).
    Lit {
        /// The leading `-`, if any.
        minus: Option<Token![-]>,
        /// The literal.
        lit: LitInt,
    },
    /// A dim parameter, `M`.
    Param(Ident),
    /// `lhs op rhs`.
    Binary {
        /// The left operand.
        lhs: Box<DimExpr>,
        /// The operator.
        op: DimOp,
        /// The right operand.
        rhs: Box<DimExpr>,
    },
    /// `(inner)`.
    Paren {
        /// The parentheses.
        paren: token::Paren,
        /// What they hold.
        inner: Box<DimExpr>,
    },
}

/// An operator of a [`DimExpr`].
pub enum DimOp {
    /// `+`
    Add(Token![+]),
    /// `-`
    Sub(Token![-]),
    /// `*`
    Mul(Token![*]),
    /// `/`, floor division.
    Div(Token![/]),
}

impl DimExpr {
    /// The value of a literal, negated for a leading `-`; `None` for anything else (or a
    /// literal past `i64`).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            DimExpr::Lit { minus, lit } => {
                let v = lit.base10_parse::<i64>().ok()?;
                Some(if minus.is_some() { v.checked_neg()? } else { v })
            }
            _ => None,
        }
    }

    /// `expr := term (('+' | '-') term)*`
    fn parse_sum(input: ParseStream) -> syn::Result<Self> {
        let mut lhs = Self::parse_product(input)?;
        loop {
            let op = if input.peek(Token![+]) {
                DimOp::Add(input.parse()?)
            } else if input.peek(Token![-]) {
                DimOp::Sub(input.parse()?)
            } else {
                return Ok(lhs);
            };
            let rhs = Self::parse_product(input)?;
            lhs = DimExpr::Binary { lhs: Box::new(lhs), op, rhs: Box::new(rhs) };
        }
    }

    /// `term := atom (('*' | '/') atom)*`
    fn parse_product(input: ParseStream) -> syn::Result<Self> {
        let mut lhs = Self::parse_atom(input)?;
        loop {
            let op = if input.peek(Token![*]) {
                DimOp::Mul(input.parse()?)
            } else if input.peek(Token![/]) {
                DimOp::Div(input.parse()?)
            } else {
                return Ok(lhs);
            };
            let rhs = Self::parse_atom(input)?;
            lhs = DimExpr::Binary { lhs: Box::new(lhs), op, rhs: Box::new(rhs) };
        }
    }

    /// `atom := INT | '-' INT | IDENT | '(' expr ')'`
    fn parse_atom(input: ParseStream) -> syn::Result<Self> {
        if input.peek(token::Paren) {
            let content;
            let paren = parenthesized!(content in input);
            let inner = Self::parse_sum(&content)?;
            if !content.is_empty() {
                return Err(content.error("expected `+`, `-`, `*`, `/` or `)` in a dim"));
            }
            return Ok(DimExpr::Paren { paren, inner: Box::new(inner) });
        }
        if input.peek(LitInt) || (input.peek(Token![-]) && input.peek2(LitInt)) {
            let minus = if input.peek(Token![-]) { Some(input.parse()?) } else { None };
            return Ok(DimExpr::Lit { minus, lit: input.parse()? });
        }
        if input.peek(Ident) {
            return Ok(DimExpr::Param(input.parse()?));
        }
        Err(input.error("expected an integer, a dim parameter or an expression over them (`H * D`, `(H + 1) / 2`)"))
    }
}

impl Parse for DimExpr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Self::parse_sum(input)
    }
}

impl quote::ToTokens for DimExpr {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            DimExpr::Lit { minus, lit } => {
                minus.to_tokens(tokens);
                lit.to_tokens(tokens);
            }
            DimExpr::Param(id) => id.to_tokens(tokens),
            DimExpr::Binary { lhs, op, rhs } => {
                lhs.to_tokens(tokens);
                match op {
                    DimOp::Add(t) => t.to_tokens(tokens),
                    DimOp::Sub(t) => t.to_tokens(tokens),
                    DimOp::Mul(t) => t.to_tokens(tokens),
                    DimOp::Div(t) => t.to_tokens(tokens),
                }
                rhs.to_tokens(tokens);
            }
            DimExpr::Paren { paren, inner } => paren.surround(tokens, |t| inner.to_tokens(t)),
        }
    }
}

/// A statement of the body.
pub enum Stmt {
    /// `let c = expr;` or `let (a, b) = expr;`
    Let {
        /// The bound names (one, or a tuple's).
        names: Vec<Ident>,
        /// The value.
        expr: Expr,
    },
    /// `y = expr;` (an output)
    Assign {
        /// The output.
        target: Ident,
        /// Its value.
        expr: Expr,
    },
    /// `(o, stats) = sdpa(...);` (outputs of a multi-output op)
    AssignTuple {
        /// The outputs.
        targets: Vec<Ident>,
        /// The multi-output call.
        expr: Expr,
    },
}

/// An expression.
pub enum Expr {
    /// `op(args, attr = value)`
    Call {
        /// The op's name.
        func: Ident,
        /// Positional arguments.
        args: Vec<Arg>,
        /// `name = value` attributes, in order.
        attrs: Vec<(Ident, AttrLit)>,
    },
    /// A tensor name.
    Name(Ident),
    /// A numeric literal (a by-value scalar).
    Number {
        /// Its value (negated for a leading `-`).
        value: f64,
        /// Where it was written.
        span: Span,
    },
}

/// A positional argument.
pub struct Arg {
    /// The argument.
    pub expr: Expr,
}

/// An attribute value.
pub enum AttrLit {
    /// `0.5`
    Float(f64, Span),
    /// `3`
    Int(i64, Span),
    /// `[0, 2]`, `[B, S, H * D]`: each item as written (the op's signature decides whether it
    /// takes integers only or extents).
    List(Vec<DimExpr>, Span),
    /// `true`
    Bool(bool, Span),
    /// `cross_correlation`
    Name(Ident),
    /// `"1"`: never a valid attribute value, kept so the checker can say what to write instead.
    Str(String, Span),
}

impl AttrLit {
    /// Where the value was written.
    pub fn span(&self) -> Span {
        match self {
            AttrLit::Float(_, s) | AttrLit::Int(_, s) | AttrLit::List(_, s) | AttrLit::Bool(_, s) => *s,
            AttrLit::Name(n) => n.span(),
            AttrLit::Str(_, s) => *s,
        }
    }
}

impl Expr {
    /// The expression's head token: the op name, the tensor name or the number.
    pub fn span(&self) -> Span {
        match self {
            Expr::Call { func, .. } => func.span(),
            Expr::Name(n) => n.span(),
            Expr::Number { span, .. } => *span,
        }
    }
}

impl Parse for Input {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut graphs = Vec::new();
        while !input.is_empty() {
            graphs.push(input.parse()?);
        }
        Ok(Input { graphs })
    }
}

impl Parse for GraphDef {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut docs = Vec::new();
        let mut settings = Vec::new();
        let mut fuse = Vec::new();
        for attr in input.call(Attribute::parse_outer)? {
            let path = attr.path();
            if path.is_ident("fuse") {
                fuse.push(FuseDecl::new(attr));
            } else if path.is_ident("compute") || path.is_ident("intermediate") {
                let key = path.get_ident().cloned().unwrap_or_else(|| Ident::new("compute", Span::call_site()));
                let value: Ident = attr.parse_args_with(Ident::parse_any)?;
                settings.push((key, value));
            } else {
                docs.push(attr);
            }
        }
        let vis: Visibility = input.parse()?;
        let name: Ident = input.parse()?;
        let mut params = Vec::new();
        if input.peek(Token![<]) {
            input.parse::<Token![<]>()?;
            while !input.peek(Token![>]) {
                if input.peek(Token![const]) {
                    input.parse::<Token![const]>()?;
                    let name: Ident = input.parse()?;
                    input.parse::<Token![:]>()?;
                    let ty: syn::Type = input.parse()?;
                    params.push(DimParam { name, runtime: false, ty: Some(ty), class: None });
                } else if input.peek(Token![dyn]) {
                    input.parse::<Token![dyn]>()?;
                    let name: Ident = input.parse()?;
                    let class = if input.peek(Token![:]) {
                        input.parse::<Token![:]>()?;
                        Some(input.parse()?)
                    } else {
                        None
                    };
                    params.push(DimParam { name, runtime: true, ty: None, class });
                } else {
                    return Err(input.error(
                        "expected a dim parameter: `const M: usize` (checked at compile time) or `dyn B` (bound at run time)",
                    ));
                }
                if !input.peek(Token![>]) {
                    input.parse::<Token![,]>()?;
                }
            }
            input.parse::<Token![>]>()?;
        }
        let content;
        parenthesized!(content in input);
        let inputs = Punctuated::<PortDecl, Token![,]>::parse_terminated(&content)?.into_iter().collect();
        input.parse::<Token![->]>()?;
        let outputs = if input.peek(token::Paren) {
            let content;
            parenthesized!(content in input);
            Punctuated::<PortDecl, Token![,]>::parse_terminated(&content)?.into_iter().collect()
        } else {
            vec![input.parse()?]
        };
        let content;
        syn::braced!(content in input);
        let mut body = Vec::new();
        while !content.is_empty() {
            body.push(content.parse()?);
        }
        Ok(GraphDef { docs, settings, fuse, vis, name, params, inputs, outputs, body })
    }
}

impl Parse for PortDecl {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let dtype = Ident::parse_any(input)?;
        let content;
        let bracket = bracketed!(content in input);
        let dims = Punctuated::<DimExpr, Token![,]>::parse_terminated(&content)?.into_iter().collect();
        let keyword = input.fork().parse::<Ident>().ok();
        let layout = match keyword {
            Some(k) if k == "order" => {
                input.parse::<Ident>()?;
                let content;
                let bracket = bracketed!(content in input);
                let items = Punctuated::<LitInt, Token![,]>::parse_terminated(&content)?.into_iter().collect();
                Some(LayoutDecl::Order(items, bracket.span.join()))
            }
            Some(k) if k == "channels_last" => Some(LayoutDecl::ChannelsLast(input.parse::<Ident>()?.span())),
            Some(k) if k == "host" => Some(LayoutDecl::Host(input.parse::<Ident>()?.span())),
            Some(k) => {
                return Err(syn::Error::new(
                    k.span(),
                    format!(
                        "expected `,`, `order [..]`, `channels_last` or `host` after the dims of `{name}`, found `{k}`"
                    ),
                ))
            }
            None => None,
        };
        Ok(PortDecl { name, dtype, dims, bracket: bracket.span.join(), layout })
    }
}

impl Parse for Stmt {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let stmt = if input.peek(Token![let]) {
            input.parse::<Token![let]>()?;
            let names = if input.peek(token::Paren) {
                let content;
                parenthesized!(content in input);
                Punctuated::<Ident, Token![,]>::parse_terminated(&content)?.into_iter().collect()
            } else {
                vec![input.parse()?]
            };
            input.parse::<Token![=]>()?;
            Stmt::Let { names, expr: input.parse()? }
        } else if input.peek(token::Paren) {
            let content;
            parenthesized!(content in input);
            let targets = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?.into_iter().collect();
            input.parse::<Token![=]>()?;
            Stmt::AssignTuple { targets, expr: input.parse()? }
        } else {
            let target: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            Stmt::Assign { target, expr: input.parse()? }
        };
        input.parse::<Token![;]>()?;
        Ok(stmt)
    }
}

fn parse_number(input: ParseStream) -> syn::Result<(f64, Option<i64>, Span)> {
    let neg = input.peek(Token![-]);
    let minus = if neg { Some(input.parse::<Token![-]>()?) } else { None };
    let sign = if neg { -1.0 } else { 1.0 };
    let (value, int, span) = if input.peek(LitFloat) {
        let lit: LitFloat = input.parse()?;
        (lit.base10_parse::<f64>()?, None, lit.span())
    } else {
        let lit: LitInt = input.parse()?;
        let v = lit.base10_parse::<i64>()?;
        (v as f64, Some(v), lit.span())
    };
    let span = minus.and_then(|m| m.span.join(span)).unwrap_or(span);
    Ok((sign * value, int.map(|v| if neg { -v } else { v }), span))
}

impl Parse for Expr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(LitFloat) || input.peek(LitInt) || input.peek(Token![-]) {
            let (value, _, span) = parse_number(input)?;
            return Ok(Expr::Number { value, span });
        }
        let name = Ident::parse_any(input)?;
        if !input.peek(token::Paren) {
            return Ok(Expr::Name(name));
        }
        let content;
        parenthesized!(content in input);
        let mut args = Vec::new();
        let mut attrs = Vec::new();
        while !content.is_empty() {
            if content.peek(Ident::peek_any) && content.peek2(Token![=]) {
                let key = Ident::parse_any(&content)?;
                content.parse::<Token![=]>()?;
                attrs.push((key, content.parse()?));
            } else {
                args.push(Arg { expr: content.parse()? });
            }
            if !content.is_empty() {
                content.parse::<Token![,]>()?;
            }
        }
        Ok(Expr::Call { func: name, args, attrs })
    }
}

impl Parse for AttrLit {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(syn::LitBool) {
            let b: syn::LitBool = input.parse()?;
            return Ok(AttrLit::Bool(b.value, b.span));
        }
        if input.peek(Ident::peek_any) {
            return Ok(AttrLit::Name(Ident::parse_any(input)?));
        }
        if input.peek(syn::LitStr) {
            let s: syn::LitStr = input.parse()?;
            return Ok(AttrLit::Str(s.value(), s.span()));
        }
        if input.peek(token::Bracket) {
            let content;
            let bracket = bracketed!(content in input);
            let items = Punctuated::<DimExpr, Token![,]>::parse_terminated(&content)?.into_iter().collect();
            return Ok(AttrLit::List(items, bracket.span.join()));
        }
        let (value, int, span) = parse_number(input)?;
        Ok(match int {
            Some(i) => AttrLit::Int(i, span),
            None => AttrLit::Float(value, span),
        })
    }
}
