//! Error collection: every error of a graph is reported in one compile (serde's `Ctxt`).

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// Collects errors; [`Ctxt::check`] must be called before it is dropped.
///
/// # Panics
/// Dropping a context without calling [`Ctxt::check`] panics (unless the thread is already
/// panicking), in release builds too: its errors would otherwise be lost silently.
pub struct Ctxt {
    errors: RefCell<Option<Vec<syn::Error>>>,
}

impl Ctxt {
    /// An empty context.
    pub fn new() -> Self {
        Ctxt { errors: RefCell::new(Some(Vec::new())) }
    }

    /// An error on the tokens of `at`.
    pub fn error(&self, at: impl ToTokens, msg: impl Display) {
        self.push(syn::Error::new_spanned(at.into_token_stream(), msg));
    }

    /// An error at `span`.
    pub fn error_span(&self, span: Span, msg: impl Display) {
        self.push(syn::Error::new(span, msg));
    }

    /// Adds an error built elsewhere (a parse error, for instance).
    pub fn push(&self, e: syn::Error) {
        if let Some(errors) = self.errors.borrow_mut().as_mut() {
            errors.push(e);
        }
    }

    /// Whether any error was reported so far.
    pub fn has_errors(&self) -> bool {
        self.errors.borrow().as_ref().is_some_and(|e| !e.is_empty())
    }

    /// All errors, combined into one, if there were any.
    pub fn check(self) -> Result<(), syn::Error> {
        let errors = self.errors.borrow_mut().take().unwrap_or_default();
        let mut iter = errors.into_iter();
        match iter.next() {
            None => Ok(()),
            Some(mut first) => {
                for e in iter {
                    first.combine(e);
                }
                Err(first)
            }
        }
    }
}

impl Default for Ctxt {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        // An unchecked context would drop the user's errors on the floor.
        if !std::thread::panicking() && self.errors.borrow().is_some() {
            panic!("Ctxt dropped without check()");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ctxt;
    use proc_macro2::Span;

    #[test]
    fn errors_are_combined_in_order() {
        let cx = Ctxt::new();
        assert!(!cx.has_errors());
        cx.error_span(Span::call_site(), "first");
        cx.error_span(Span::call_site(), "second");
        assert!(cx.has_errors());
        let messages: Vec<String> = cx.check().unwrap_err().into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["first", "second"]);
    }

    #[test]
    fn a_checked_context_without_errors_is_ok() {
        assert!(Ctxt::default().check().is_ok());
    }

    #[test]
    #[should_panic(expected = "Ctxt dropped without check()")]
    fn an_unchecked_context_panics_on_drop() {
        let cx = Ctxt::new();
        cx.error_span(Span::call_site(), "lost");
    }
}
