//! Label and field selectors, parsed and matched the way kube-apiserver does it.
//!
//! Clients send selectors as the `labelSelector` and `fieldSelector` query parameters
//! (kubectl's `-l` and `--field-selector`), and objects embed label selectors as
//! `metav1.LabelSelector` (`matchLabels` / `matchExpressions`). The grammar, the
//! validation of keys and values, the matching rules and the error texts follow
//! apimachinery's `pkg/labels` and `pkg/fields`, because clients compare canonical
//! strings, expect the same objects back for the same selector, and show the server's
//! error message to users verbatim. Deliberate differences are noted where they occur.

use std::fmt;

use serde_json::{Map, Value};

/// Longest label value, and longest name part of a label key, in bytes.
const LABEL_VALUE_MAX_LEN: usize = 63;
const QUALIFIED_NAME_MAX_LEN: usize = 63;
/// Longest DNS subdomain allowed as a label key prefix.
const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

// The regular expressions are implemented by hand below; the patterns only appear in
// error messages, spelled exactly as Kubernetes spells them so that users recognise them.
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// Why a selector was rejected. The texts match kube-apiserver's so that clients see
/// the familiar messages in the 400 response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// One label requirement is malformed or fails key/value validation.
    #[error("unable to parse requirement: {0}")]
    Requirement(String),
    /// The label selector is malformed between requirements (a stray token, a
    /// trailing comma).
    #[error("{0}")]
    LabelSyntax(String),
    /// A `metav1.LabelSelector` object is malformed or fails validation.
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm {
        /// The whole selector as sent.
        selector: String,
        /// The offending comma-separated term.
        term: String,
    },
    /// A field selector value contains a backslash escape other than `\\`, `\,`, `\=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    FieldEscape(String),
    /// A field selector value contains an unescaped `,` or `=`.
    #[error("invalid field selector: unescaped character in value: {0:?}")]
    FieldUnescaped(char),
}

// ---------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------

/// How a label requirement relates its key to its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v`
    Equals,
    /// `k==v` (same meaning as `=`; kept apart because the canonical string keeps it).
    DoubleEquals,
    /// `k!=v`; also matches objects without the key.
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`; also matches objects without the key.
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>5`; the label must be present and parse as an integer.
    GreaterThan,
    /// `k<5`; the label must be present and parse as an integer.
    LessThan,
}

impl Operator {
    /// The operator as written in the canonical string, with the spacing Kubernetes uses.
    fn as_infix(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => "",
        }
    }
}

/// A label set a selector is matched against: an object's `metadata.labels` as JSON,
/// or a typed map.
pub trait Labels {
    /// The label `key`: `None` when absent, `Some(None)` when present but not a string.
    fn label(&self, key: &str) -> Option<Option<&str>>;
}

impl Labels for Map<String, Value> {
    fn label(&self, key: &str) -> Option<Option<&str>> {
        self.get(key).map(Value::as_str)
    }
}

impl Labels for std::collections::BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<Option<&str>> {
        self.get(key).map(|v| Some(v.as_str()))
    }
}

/// One ANDed clause of a label selector: a key, an operator and (sorted, distinct) values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// The label key, possibly with a DNS-subdomain prefix (`example.com/name`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and without duplicates; empty for `Exists`/`DoesNotExist`.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set satisfies this requirement.
    ///
    /// In JSON labels, a key whose value is not a string counts as present but equal
    /// to no value.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let present = labels.label(&self.key);
        let value = present.flatten();
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => value.is_some_and(has),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(has),
            Operator::Exists => present.is_some(),
            Operator::DoesNotExist => present.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                // The value was checked at construction; a failure here means "no match".
                let Some(bound) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        if matches!(self.operator, Operator::Exists | Operator::DoesNotExist) {
            return Ok(());
        }
        f.write_str(self.operator.as_infix())?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A parsed label selector (the `labelSelector` query parameter, or a
/// `metav1.LabelSelector`): requirements that must all hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    /// Sorted by key, as Kubernetes sorts them, so the canonical string is stable.
    requirements: Vec<Requirement>,
    /// A null `metav1.LabelSelector` selects nothing, unlike an empty one.
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every label set (what `""` parses to).
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no label set (what a null `metav1.LabelSelector` means).
    pub fn nothing() -> Self {
        LabelSelector { requirements: Vec::new(), nothing: true }
    }

    /// Parses the query-string syntax, e.g. `app=web,tier in (a,b),!canary`.
    ///
    /// An empty (or all-whitespace) string selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = LabelParser { items: lex_label_selector(s), pos: 0 };
        let mut requirements = parser.parse()?;
        // Stable sort: Kubernetes sorts by key too, but with an unstable sort; stability
        // keeps equal keys in input order so the canonical string is deterministic.
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// Converts a `metav1.LabelSelector` (`{matchLabels, matchExpressions}`).
    ///
    /// An empty object selects everything; JSON `null` selects nothing (as a nil
    /// `*metav1.LabelSelector` does in Kubernetes). Operators are `In`, `NotIn`,
    /// `Exists` and `DoesNotExist`.
    pub fn from_label_selector(v: &Value) -> Result<Self, SelectorError> {
        let invalid = |msg: String| SelectorError::InvalidLabelSelector(msg);
        let obj = match v {
            Value::Null => return Ok(Self::nothing()),
            Value::Object(obj) => obj,
            _ => return Err(invalid("label selector must be an object".into())),
        };
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (key, value) in labels {
                    let Some(value) = value.as_str() else {
                        return Err(invalid(format!("matchLabels[{key}]: label values must be strings")));
                    };
                    let r = new_requirement(key, Operator::Equals, vec![value.to_owned()]).map_err(invalid)?;
                    requirements.push(r);
                }
            }
            Some(_) => return Err(invalid("matchLabels must be an object".into())),
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, expr) in exprs.iter().enumerate() {
                    requirements.push(match_expression(i, expr)?);
                }
            }
            Some(_) => return Err(invalid("matchExpressions must be an array".into())),
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements, nothing: false })
    }

    /// Whether the labels (the object under `metadata.labels`, or a typed map) satisfy
    /// every requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector places no restriction at all (so filtering can be skipped).
    pub fn matches_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether the selector came from a null `metav1.LabelSelector` and matches nothing.
    pub fn matches_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The single value every matching label set must have for `key`, if the selector
    /// pins it with `=`, `==` or a one-value `in` (Kubernetes' `RequiresExactMatch`).
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match r.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In if r.values.len() == 1 => r.values.first().map(String::as_str),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string: requirements sorted by key, values sorted, joined by `,`.
    /// Both the everything and the nothing selector print as the empty string, as in
    /// Kubernetes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Converts one `matchExpressions` entry.
fn match_expression(index: usize, expr: &Value) -> Result<Requirement, SelectorError> {
    let invalid = |msg: String| SelectorError::InvalidLabelSelector(msg);
    let Some(expr) = expr.as_object() else {
        return Err(invalid(format!("matchExpressions[{index}] must be an object")));
    };
    // Absent strings decode to "" in Go and then fail validation with the usual message.
    let string_field = |name: &str| -> Result<String, SelectorError> {
        match expr.get(name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(invalid(format!("matchExpressions[{index}].{name} must be a string"))),
        }
    };
    let key = string_field("key")?;
    let operator = string_field("operator")?;
    let op = match operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => return Err(invalid(format!("{} is not a valid label selector operator", go_quote(other)))),
    };
    let values = match expr.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(vals)) => {
            let mut out = Vec::with_capacity(vals.len());
            for v in vals {
                let Some(s) = v.as_str() else {
                    return Err(invalid(format!("matchExpressions[{index}].values must be strings")));
                };
                out.push(s.to_owned());
            }
            out
        }
        Some(_) => return Err(invalid(format!("matchExpressions[{index}].values must be an array"))),
    };
    new_requirement(&key, op, values).map_err(invalid)
}

/// How many errors about single values one requirement spells out. Kubernetes lists
/// every bad value, each error repeating the key and the validation rule: a 64 KiB
/// `in (...)` list made 10 MB of error text (and took over 100 ms) that way. Past this
/// many the rest are only counted.
const MAX_VALUE_ERRORS: usize = 32;

/// Validates and builds a requirement the way `labels.NewRequirement` does, returning
/// the aggregated field-error text on failure. `values` are reported in the order given
/// and stored sorted and de-duplicated (they are a set); at most [`MAX_VALUE_ERRORS`]
/// bad values are described.
fn new_requirement(key: &str, op: Operator, mut values: Vec<String>) -> Result<Requirement, String> {
    let mut errs = Vec::new();
    // Errors about single values: described up to the limit, then counted.
    let mut value_errors = 0usize;
    let mut value_error = |errs: &mut Vec<String>, describe: &dyn Fn() -> String| {
        if value_errors < MAX_VALUE_ERRORS {
            errs.push(describe());
        }
        value_errors += 1;
    };
    let key_errs = qualified_name_errors(key);
    if !key_errs.is_empty() {
        errs.push(invalid_field("key", &go_quote(key), &key_errs.join("; ")));
    }
    match op {
        Operator::In | Operator::NotIn => {
            if values.is_empty() {
                errs.push(invalid_field("values", &go_string_slice(&values), "for 'in', 'notin' operators, values set can't be empty"));
            }
        }
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
            if values.len() != 1 {
                errs.push(invalid_field("values", &go_string_slice(&values), "exact-match compatibility requires one single value"));
            }
        }
        Operator::Exists | Operator::DoesNotExist => {
            if !values.is_empty() {
                errs.push(invalid_field("values", &go_string_slice(&values), "values set must be empty for exists and does not exist"));
            }
        }
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errs.push(invalid_field("values", &go_string_slice(&values), "for 'Gt', 'Lt' operators, exactly one value is required"));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    value_error(&mut errs, &|| {
                        invalid_field(&format!("values[{i}]"), &go_quote(v), "for 'Gt', 'Lt' operators, the value must be an integer")
                    });
                }
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        if !is_label_value(v) {
            value_error(&mut errs, &|| invalid_field(&format!("values[{i}][{key}]"), &go_quote(v), &label_value_errors(v).join("; ")));
        }
    }
    if value_errors > MAX_VALUE_ERRORS {
        errs.push(format!("and {} more invalid values", value_errors - MAX_VALUE_ERRORS));
    }
    if !errs.is_empty() {
        return Err(aggregate(errs));
    }
    values.sort();
    values.dedup();
    Ok(Requirement { key: key.to_owned(), operator: op, values })
}

// --- label selector lexer and parser --------------------------------------

/// Token kinds of the label selector grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    End,
    Ident,
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    OpenPar,
    ClosePar,
    Comma,
}

/// A token and its text (the text is what error messages quote).
#[derive(Debug, Clone, Copy)]
struct Item<'a> {
    tok: Tok,
    lit: &'a str,
}

const END: Item<'static> = Item { tok: Tok::End, lit: "" };

fn is_label_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Recognises an operator or punctuation token at the start of `rest`.
///
/// Two-character operators win over their one-character prefixes (`!=` over `!`), which
/// is what Kubernetes' greedy scan amounts to. Works on bytes because the identifier
/// scan probes every byte, including those inside multi-byte characters.
fn special_token(rest: &[u8]) -> Option<(Tok, usize)> {
    let next = rest.get(1).copied();
    Some(match rest.first()? {
        b'!' if next == Some(b'=') => (Tok::NotEquals, 2),
        b'!' => (Tok::Not, 1),
        b'=' if next == Some(b'=') => (Tok::DoubleEquals, 2),
        b'=' => (Tok::Equals, 1),
        b'>' => (Tok::GreaterThan, 1),
        b'<' => (Tok::LessThan, 1),
        b'(' => (Tok::OpenPar, 1),
        b')' => (Tok::ClosePar, 1),
        b',' => (Tok::Comma, 1),
        _ => return None,
    })
}

/// Splits a label selector into tokens, always ending with `End`.
///
/// Identifiers run until whitespace or an operator character; anything else
/// (non-ASCII, NUL, `/`, ...) stays inside the identifier and is rejected later by key
/// or value validation. Every split point is an ASCII byte, so slicing is safe.
fn lex_label_selector(s: &str) -> Vec<Item<'_>> {
    let bytes = s.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && is_label_whitespace(bytes[i]) {
            i += 1;
        }
        if i >= bytes.len() {
            items.push(END);
            return items;
        }
        if let Some((tok, len)) = special_token(&bytes[i..]) {
            items.push(Item { tok, lit: &s[i..i + len] });
            i += len;
            continue;
        }
        let start = i;
        while i < bytes.len() && !is_label_whitespace(bytes[i]) && special_token(&bytes[i..]).is_none() {
            i += 1;
        }
        let lit = &s[start..i];
        let tok = match lit {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident,
        };
        items.push(Item { tok, lit });
    }
}

/// Recursive-descent parser over the token list. `in`/`notin` are keywords only where
/// an operator is expected; elsewhere they are ordinary identifiers (`in in (in)`).
struct LabelParser<'a> {
    items: Vec<Item<'a>>,
    pos: usize,
}

impl<'a> LabelParser<'a> {
    /// The current token; `values` turns the `in`/`notin` keywords into identifiers.
    /// Reading past the end keeps returning `End`.
    fn lookahead(&self, values: bool) -> Item<'a> {
        let mut item = self.items.get(self.pos).copied().unwrap_or(END);
        if values && matches!(item.tok, Tok::In | Tok::NotIn) {
            item.tok = Tok::Ident;
        }
        item
    }

    fn consume(&mut self, values: bool) -> Item<'a> {
        let item = self.lookahead(values);
        self.pos = self.pos.saturating_add(1);
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let item = self.lookahead(true);
            match item.tok {
                Tok::Ident | Tok::Not => {
                    let r = self.parse_requirement().map_err(SelectorError::Requirement)?;
                    requirements.push(r);
                    let next = self.consume(true);
                    match next.tok {
                        Tok::End => return Ok(requirements),
                        Tok::Comma => {
                            let after = self.lookahead(true);
                            if !matches!(after.tok, Tok::Ident | Tok::Not) {
                                return Err(SelectorError::LabelSyntax(format!("found '{}', expected: identifier after ','", after.lit)));
                            }
                        }
                        _ => return Err(SelectorError::LabelSyntax(format!("found '{}', expected: ',' or 'end of string'", next.lit))),
                    }
                }
                Tok::End => return Ok(requirements),
                _ => return Err(SelectorError::LabelSyntax(format!("found '{}', expected: !, identifier, or 'end of string'", item.lit))),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op) = inferred {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let mut values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => vec![self.parse_exact_value()?],
        };
        // Kubernetes collects values into a set before validating them.
        values.sort();
        values.dedup();
        new_requirement(key, op, values)
    }

    /// Reads `[!]key`; the operator is known already for `!key` and for a bare key.
    fn parse_key_and_infer_operator(&mut self) -> Result<(&'a str, Option<Operator>), String> {
        let mut item = self.consume(true);
        let mut op = None;
        if item.tok == Tok::Not {
            op = Some(Operator::DoesNotExist);
            item = self.consume(true);
        }
        if item.tok != Tok::Ident {
            return Err(format!("found '{}', expected: identifier", item.lit));
        }
        let errs = qualified_name_errors(item.lit);
        if !errs.is_empty() {
            // Kubernetes validates the key here with no field path, hence "<nil>".
            return Err(invalid_field("<nil>", &go_quote(item.lit), &errs.join("; ")));
        }
        if op.is_none() && matches!(self.lookahead(true).tok, Tok::End | Tok::Comma) {
            op = Some(Operator::Exists);
        }
        Ok((item.lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let item = self.consume(false);
        Ok(match item.tok {
            Tok::In => Operator::In,
            Tok::NotIn => Operator::NotIn,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::NotEquals => Operator::NotEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            _ => return Err(format!("found '{}', expected: in, notin, =, ==, !=, gt, lt", item.lit)),
        })
    }

    /// Reads `(v1,v2,...)`. Empty entries are the empty string: `()` is `{""}` and
    /// `(a,,b)` is `{"", a, b}`.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let open = self.consume(true);
        if open.tok != Tok::OpenPar {
            return Err(format!("found '{}' expected: '('", open.lit));
        }
        let item = self.lookahead(true);
        match item.tok {
            Tok::Ident | Tok::Comma => {
                let values = self.parse_identifiers_list()?;
                let close = self.consume(true);
                if close.tok != Tok::ClosePar {
                    return Err(format!("found '{}', expected: ')'", close.lit));
                }
                Ok(values)
            }
            Tok::ClosePar => {
                self.consume(true);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{}', expected: ',', ')' or identifier", item.lit)),
        }
    }

    /// Reads a comma-separated list up to (not including) `)`.
    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let item = self.consume(true);
            match item.tok {
                Tok::Ident => {
                    values.push(item.lit.to_owned());
                    let next = self.lookahead(true);
                    match next.tok {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(values),
                        _ => return Err(format!("found '{}', expected: ',' or ')'", next.lit)),
                    }
                }
                Tok::Comma => {
                    // A leading, doubled or trailing comma stands for an empty value.
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.lookahead(true).tok {
                        Tok::ClosePar => {
                            values.push(String::new());
                            return Ok(values);
                        }
                        Tok::Comma => values.push(String::new()),
                        _ => {}
                    }
                }
                // Every iteration consumes a token and `End` lands here, so this terminates.
                _ => return Err(format!("found '{}', expected: ',', or identifier", item.lit)),
            }
        }
    }

    /// Reads the value after `=`, `==`, `!=`, `>` or `<`; a missing value is `""`.
    fn parse_exact_value(&mut self) -> Result<String, String> {
        if matches!(self.lookahead(true).tok, Tok::End | Tok::Comma) {
            return Ok(String::new());
        }
        let item = self.consume(true);
        if item.tok == Tok::Ident {
            Ok(item.lit.to_owned())
        } else {
            Err(format!("found '{}', expected: identifier", item.lit))
        }
    }
}

// --- key and value validation ---------------------------------------------

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_alnum(first) && is_alnum(last) && b.iter().all(|&c| is_alnum(c) || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|label| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(&first), Some(&last)) => lower_alnum(first) && lower_alnum(last) && b.iter().all(|&c| lower_alnum(c) || c == b'-'),
            _ => false,
        }
    })
}

/// Kubernetes' `RegexError` wording, including its doubled spaces before "or".
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = String::from(msg);
    if examples.is_empty() {
        out.push_str(&format!(" (regex used for validation is '{fmt}')"));
        return out;
    }
    out.push_str(" (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// The problems with a label key (`[prefix/]name`), as `validation.IsQualifiedName`
/// reports them; empty when the key is valid.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > DNS1123_SUBDOMAIN_MAX_LEN {
                    errs.push(format!("prefix part {}", max_len_error(DNS1123_SUBDOMAIN_MAX_LEN)));
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {}", regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, &["example.com"])));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LEN {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX_LEN)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {}", regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])));
    }
    errs
}

/// Whether [`label_value_errors`] finds nothing, without describing anything.
fn is_label_value(value: &str) -> bool {
    value.len() <= LABEL_VALUE_MAX_LEN && (value.is_empty() || is_qualified_name_part(value))
}

/// The problems with a label value, as `validation.IsValidLabelValue` reports them.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LEN {
        errs.push(max_len_error(LABEL_VALUE_MAX_LEN));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

// --- error formatting in the style of apimachinery's field.Error -------------

/// `<path>: Invalid value: <value>: <detail>`, as `field.Invalid(...).Error()` prints.
fn invalid_field(path: &str, bad_value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {bad_value}: {detail}")
}

/// Joins field errors the way `ErrorList.ToAggregate().Error()` does: duplicates
/// dropped, a single error bare, several in brackets.
fn aggregate(errs: Vec<String>) -> String {
    // A set, not a scan of the list: one error per value of a long `in (...)` list
    // made this quadratic (tests/fuzz.rs).
    let mut seen = std::collections::HashSet::with_capacity(errs.len());
    let unique: Vec<&str> = errs.iter().map(String::as_str).filter(|e| seen.insert(*e)).collect();
    match unique.as_slice() {
        [one] => (*one).to_owned(),
        _ => format!("[{}]", unique.join(", ")),
    }
}

/// Go's `%q` for a string: double-quoted with backslash escapes for quotes,
/// backslashes and control characters.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x80 && c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` for a `[]string`, which is how Kubernetes prints a bad value list.
fn go_string_slice(values: &[String]) -> String {
    if values.is_empty() {
        return "[]string(nil)".to_owned();
    }
    let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

// ---------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------

/// How a field selector term compares the field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One ANDed term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    op: FieldOperator,
    /// Unescaped.
    value: String,
}

/// A parsed field selector: `(field, =|!=, value)` terms that must all hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// The selector with no terms, which matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses `field=value,field!=value,...`.
    ///
    /// The field is everything before the first operator, taken literally (no
    /// whitespace trimming, no escapes). In values `\\`, `\,` and `\=` stand for
    /// `\`, `,` and `=`; any other backslash sequence and any unescaped `,` or `=` is
    /// an error. An empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_field_terms(s);
        // Kubernetes sorts the raw terms before parsing them, which fixes both the term
        // order and which bad term an error names.
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, raw)) = split_field_term(part) else {
                return Err(SelectorError::FieldTerm { selector: s.to_owned(), term: part.to_owned() });
            };
            let value = unescape_field_value(raw)?;
            // Kubernetes turns a term with an empty field and an empty value (a bare
            // "=" or "!=") into "everything" and drops it.
            if field.is_empty() && value.is_empty() {
                continue;
            }
            terms.push(FieldTerm { field: field.to_owned(), op, value });
        }
        Ok(FieldSelector { terms })
    }

    /// The field paths the selector mentions, in term order (possibly repeated), so the
    /// caller can reject fields the resource does not support.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// Whether an object satisfies every term. `get(field)` returns the object's value
    /// for a field path such as `metadata.name`; a missing value compares as `""`.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let actual = get(&t.field).unwrap_or_default();
            match t.op {
                FieldOperator::Equals => actual == t.value,
                FieldOperator::NotEquals => actual != t.value,
            }
        })
    }

    /// The value an equality term requires for `field`, if there is one (Kubernetes'
    /// `RequiresExactMatch`): with `metadata.name=x` this is `Some("x")`, which lets the
    /// store do a point lookup.
    ///
    /// Other terms may exist (`metadata.name=x,status.phase=Running`), so the object
    /// found still has to pass [`FieldSelector::matches`].
    pub fn single_equality(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|t| t.op == FieldOperator::Equals && t.field == field).map(|t| t.value.as_str())
    }

    /// Whether the selector has no terms.
    pub fn matches_everything(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms as `(field, operator, unescaped value)`.
    pub fn terms(&self) -> impl Iterator<Item = (&str, FieldOperator, &str)> {
        self.terms.iter().map(|t| (t.field.as_str(), t.op, t.value.as_str()))
    }
}

impl fmt::Display for FieldSelector {
    /// The canonical string: terms in sorted order, values re-escaped, `==` shown as `=`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match t.op {
                FieldOperator::Equals => "=",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{}{}", t.field, op, escape_field_value(&t.value))?;
        }
        Ok(())
    }
}

/// Splits on commas that are not preceded by an escaping backslash; the escapes stay
/// in the terms for [`unescape_field_value`] to resolve.
fn split_field_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at the first operator. At each position `!=` is tried before `==`
/// before `=`, so `a==b` has the value `b`, not `=b`.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    const OPS: [(&str, FieldOperator); 3] = [("!=", FieldOperator::NotEquals), ("==", FieldOperator::Equals), ("=", FieldOperator::Equals)];
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (text, op) in OPS {
            if let Some(value) = rest.strip_prefix(text) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

fn unescape_field_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(SelectorError::FieldEscape(format!("\\{c}"))),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(SelectorError::FieldUnescaped(c)),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::FieldEscape("\\".to_owned()));
    }
    Ok(out)
}

/// Inverse of [`unescape_field_value`].
fn escape_field_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn sel(s: &str) -> LabelSelector {
        match LabelSelector::parse(s) {
            Ok(sel) => sel,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    fn err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(sel) => panic!("{s:?} should not parse, got {sel:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_selects_everything() {
        for s in ["", "   ", "\t\n"] {
            let s = sel(s);
            assert!(s.matches_everything());
            assert!(s.matches(&labels(json!({}))));
            assert_eq!(s.to_string(), "");
        }
        assert!(LabelSelector::everything().matches(&labels(json!({"a": "b"}))));
    }

    #[test]
    fn equality_operators() {
        let l = labels(json!({"app": "web", "tier": "front"}));
        assert!(sel("app=web").matches(&l));
        assert!(sel("app==web").matches(&l));
        assert!(sel(" app = web , tier == front ").matches(&l));
        assert!(!sel("app=db").matches(&l));
        assert!(!sel("missing=web").matches(&l));
        assert!(sel("app!=db").matches(&l));
        assert!(!sel("app!=web").matches(&l));
        // != also matches objects without the key.
        assert!(sel("missing!=web").matches(&l));
        // An empty value means the label is present and empty.
        assert!(sel("empty=").matches(&labels(json!({"empty": ""}))));
        assert!(!sel("empty=").matches(&l));
        assert!(sel("empty=,app=web").matches(&labels(json!({"empty": "", "app": "web"}))));
    }

    #[test]
    fn set_operators() {
        let l = labels(json!({"env": "prod"}));
        assert!(sel("env in (prod, staging)").matches(&l));
        assert!(sel("env in(prod)").matches(&l));
        assert!(!sel("env in (dev)").matches(&l));
        assert!(!sel("other in (prod)").matches(&l));
        assert!(sel("env notin (dev,qa)").matches(&l));
        assert!(!sel("env notin (prod)").matches(&l));
        // notin matches a missing key.
        assert!(sel("other notin (prod)").matches(&l));
        // "()" is the set holding the empty string, as in Kubernetes.
        let empty = sel("env in ()");
        assert_eq!(empty.requirements()[0].values(), [String::new()]);
        assert!(empty.matches(&labels(json!({"env": ""}))));
        assert!(!empty.matches(&l));
        assert_eq!(sel("x in (a,,b)").requirements()[0].values(), ["", "a", "b"]);
        assert_eq!(sel("x in (,a)").requirements()[0].values(), ["", "a"]);
        assert_eq!(sel("x in (a,)").requirements()[0].values(), ["", "a"]);
        // The keywords are identifiers where a key or value is expected.
        let kw = sel("in in (in, notin)");
        assert!(kw.matches(&labels(json!({"in": "notin"}))));
        assert_eq!(kw.to_string(), "in in (in,notin)");
    }

    #[test]
    fn existence_operators() {
        let l = labels(json!({"canary": ""}));
        assert!(sel("canary").matches(&l));
        assert!(!sel("stable").matches(&l));
        assert!(sel("!stable").matches(&l));
        assert!(!sel("!canary").matches(&l));
        assert!(sel("! stable").matches(&l));
    }

    #[test]
    fn integer_comparisons() {
        let l = labels(json!({"replicas": "7", "name": "x"}));
        assert!(sel("replicas>5").matches(&l));
        assert!(!sel("replicas>7").matches(&l));
        assert!(sel("replicas<8").matches(&l));
        assert!(!sel("replicas<7").matches(&l));
        // Missing or non-integer labels never satisfy a comparison.
        assert!(!sel("missing<8").matches(&l));
        assert!(!sel("name>1").matches(&l));
        assert_eq!(
            err("replicas>five"),
            "unable to parse requirement: values[0]: Invalid value: \"five\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert!(LabelSelector::parse("replicas>").is_err());
    }

    #[test]
    fn combined_requirements() {
        let s = sel("k in (a,b),!x");
        assert!(s.matches(&labels(json!({"k": "a"}))));
        assert!(s.matches(&labels(json!({"k": "b", "y": "1"}))));
        assert!(!s.matches(&labels(json!({"k": "a", "x": "1"}))));
        assert!(!s.matches(&labels(json!({"k": "c"}))));
        assert!(!s.matches(&labels(json!({}))));
        assert_eq!(s.to_string(), "k in (a,b),!x");
    }

    #[test]
    fn canonical_string() {
        assert_eq!(sel("b in (y,x,y),a").to_string(), "a,b in (x,y)");
        assert_eq!(sel("z!=1, y==2,x=3").to_string(), "x=3,y==2,z!=1");
        assert_eq!(sel("n notin (b, a), !m, g>3, l<4").to_string(), "g>3,l<4,!m,n notin (a,b)");
        // The canonical string parses back to the same selector.
        let s = sel("b in (y,x),a,!c,d!=e");
        assert_eq!(sel(&s.to_string()), s);
    }

    #[test]
    fn prefixed_keys() {
        let l = labels(json!({"app.kubernetes.io/name": "web", "example.com/tier": "x"}));
        assert!(sel("app.kubernetes.io/name=web").matches(&l));
        assert!(sel("example.com/tier in (x)").matches(&l));
        assert!(sel("!example.com/other").matches(&l));
        assert!(sel("example.com/tier").matches(&l));
    }

    #[test]
    fn requires_exact_match() {
        let s = sel("a=1,b in (2),c in (3,4),d!=5");
        assert_eq!(s.requires_exact_match("a"), Some("1"));
        assert_eq!(s.requires_exact_match("b"), Some("2"));
        assert_eq!(s.requires_exact_match("c"), None);
        assert_eq!(s.requires_exact_match("d"), None);
        assert_eq!(s.requires_exact_match("e"), None);
    }

    #[test]
    fn syntax_errors() {
        assert_eq!(err("a in (b"), "unable to parse requirement: found '', expected: ',' or ')'");
        assert_eq!(err("a in b)"), "unable to parse requirement: found 'b' expected: '('");
        assert_eq!(err("a in (b c)"), "unable to parse requirement: found 'c', expected: ',' or ')'");
        assert_eq!(err("a in (b,c"), "unable to parse requirement: found '', expected: ',' or ')'");
        assert_eq!(err("a in (=)"), "unable to parse requirement: found '=', expected: ',', ')' or identifier");
        assert_eq!(err("a b"), "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt");
        assert_eq!(err("a=(b)"), "unable to parse requirement: found '(', expected: identifier");
        assert_eq!(err("a=b c"), "found 'c', expected: ',' or 'end of string'");
        assert_eq!(err("a=b)"), "found ')', expected: ',' or 'end of string'");
        assert_eq!(err("a,"), "found '', expected: identifier after ','");
        assert_eq!(err("a,,b"), "found ',', expected: identifier after ','");
        assert_eq!(err(",a"), "found ',', expected: !, identifier, or 'end of string'");
        assert_eq!(err("(a)"), "found '(', expected: !, identifier, or 'end of string'");
        assert_eq!(err("!"), "unable to parse requirement: found '', expected: identifier");
        assert_eq!(err("!a=b"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(err("a in (b))"), "found ')', expected: ',' or 'end of string'");
    }

    #[test]
    fn invalid_keys() {
        let qn = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        assert_eq!(err("-a=b"), format!("unable to parse requirement: <nil>: Invalid value: \"-a\": {qn}"));
        let e = err("Example.com/a=b");
        assert!(
            e.starts_with(
                "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain"
            ),
            "{e}"
        );
        let e = err("a/b/c=d");
        assert!(e.contains("\"a/b/c\": a qualified name must consist of"), "{e}");
        assert!(e.ends_with("with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"), "{e}");
        let e = err("/a");
        assert!(e.contains("\"/a\": prefix part must be non-empty"), "{e}");
        let e = err("a/");
        assert!(e.contains("name part must be non-empty; name part must consist"), "{e}");
        let long = "k".repeat(64);
        let e = err(&long);
        assert!(e.contains("name part must be no more than 63 characters"), "{e}");
        assert!(LabelSelector::parse(&"k".repeat(63)).is_ok());
        // Non-ASCII and NUL stay inside the identifier and fail validation.
        assert!(LabelSelector::parse("é=1").is_err());
        assert!(LabelSelector::parse("\0a").is_err());
        assert!(LabelSelector::parse("a\0=b").is_err());
    }

    #[test]
    fn invalid_values() {
        let long = "v".repeat(64);
        assert_eq!(
            err(&format!("a={long}")),
            format!("unable to parse requirement: values[0][a]: Invalid value: \"{long}\": must be no more than 63 characters")
        );
        assert!(LabelSelector::parse(&format!("a={}", "v".repeat(63))).is_ok());
        let e = err("a=-b");
        assert!(
            e.starts_with("unable to parse requirement: values[0][a]: Invalid value: \"-b\": a valid label must be an empty string"),
            "{e}"
        );
        assert!(
            e.ends_with(
                "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ),
            "{e}"
        );
        // Values are reported by their position in the sorted set.
        let e = err("a in (z, _x)");
        assert!(e.contains("values[0][a]: Invalid value: \"_x\""), "{e}");
        // Several problems with one value are joined by "; ".
        let bad = format!("-{}", "x".repeat(70));
        let e = err(&format!("a in (ok,{bad})"));
        assert!(e.starts_with("unable to parse requirement: values[0][a]: Invalid value:"), "{e}");
        assert!(e.contains("must be no more than 63 characters; a valid label"), "{e}");
        // Several bad values are aggregated in brackets.
        let e = err("a in (-b,_c)");
        assert!(e.starts_with("unable to parse requirement: [values[0][a]: Invalid value: \"-b\""), "{e}");
        assert!(e.contains(", values[1][a]: Invalid value: \"_c\""), "{e}");
        assert!(e.ends_with(']'), "{e}");
        // A long list of bad values is described up to a limit, then counted.
        let many = format!("a in ({})", (0..1000).map(|i| format!("-{i}")).collect::<Vec<_>>().join(","));
        let e = err(&many);
        assert_eq!(e.matches("Invalid value").count(), MAX_VALUE_ERRORS, "{e}");
        assert!(e.ends_with(&format!(", and {} more invalid values]", 1000 - MAX_VALUE_ERRORS)), "{e}");
    }

    #[test]
    fn from_label_selector_object() {
        let v = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "example.com/owner", "operator": "Exists"}
            ]
        });
        let s = match LabelSelector::from_label_selector(&v) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(s.to_string(), "app=web,!canary,env notin (dev),example.com/owner,tier in (back,front)");
        assert!(s.matches(&labels(json!({"app": "web", "tier": "front", "example.com/owner": "me"}))));
        assert!(!s.matches(&labels(json!({"app": "web", "tier": "front", "example.com/owner": "me", "canary": "1"}))));
        assert!(!s.matches(&labels(json!({"app": "web", "tier": "front", "example.com/owner": "me", "env": "dev"}))));
        assert!(!s.matches(&labels(json!({"app": "web", "tier": "front"}))));

        let empty = LabelSelector::from_label_selector(&json!({})).ok();
        assert!(empty.as_ref().is_some_and(|s| s.matches_everything() && s.matches(&Map::new())));
        let empty = LabelSelector::from_label_selector(&json!({"matchLabels": {}, "matchExpressions": []})).ok();
        assert!(empty.is_some_and(|s| s.matches_everything()));
        let nothing = LabelSelector::from_label_selector(&Value::Null).ok();
        assert!(nothing.is_some_and(|s| s.matches_nothing() && !s.matches(&Map::new()) && !s.matches_everything()));
    }

    #[test]
    fn from_label_selector_errors() {
        let e = |v: Value| match LabelSelector::from_label_selector(&v) {
            Ok(s) => panic!("{v} should be rejected, got {s:?}"),
            Err(e) => e.to_string(),
        };
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]})),
            "\"Equals\" is not a valid label selector operator"
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})),
            "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
        );
        assert_eq!(
            e(json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x", "y"]}]})),
            "values: Invalid value: []string{\"x\", \"y\"}: values set must be empty for exists and does not exist"
        );
        assert!(e(json!({"matchLabels": {"a": "-bad"}})).starts_with("values[0][a]: Invalid value: \"-bad\""));
        assert!(e(json!({"matchLabels": {"bad key": "x"}})).starts_with("key: Invalid value: \"bad key\""));
        assert!(e(json!({"matchLabels": {"a": 1}})).contains("must be strings"));
        assert!(e(json!({"matchExpressions": {}})).contains("must be an array"));
        assert!(e(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]})).contains("must be strings"));
        assert!(e(json!("app=web")).contains("must be an object"));
    }

    #[test]
    fn non_string_label_values() {
        let l = labels(json!({"n": 5}));
        assert!(sel("n").matches(&l));
        assert!(!sel("n=5").matches(&l));
        assert!(sel("n!=5").matches(&l));
        assert!(!sel("n>1").matches(&l));
    }

    fn fsel(s: &str) -> FieldSelector {
        match FieldSelector::parse(s) {
            Ok(f) => f,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    fn getter<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |f| pairs.iter().find(|(k, _)| *k == f).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn field_selector_basics() {
        let pod = [("metadata.name", "web-0"), ("status.phase", "Running")];
        assert!(fsel("").matches_everything());
        assert!(fsel("").matches(getter(&pod)));
        assert!(fsel("metadata.name=web-0").matches(getter(&pod)));
        assert!(fsel("metadata.name==web-0").matches(getter(&pod)));
        assert!(!fsel("metadata.name=web-1").matches(getter(&pod)));
        assert!(fsel("status.phase!=Pending").matches(getter(&pod)));
        assert!(!fsel("status.phase!=Running").matches(getter(&pod)));
        assert!(fsel("metadata.name=web-0,status.phase!=Pending").matches(getter(&pod)));
        assert!(!fsel("metadata.name=web-0,status.phase!=Running").matches(getter(&pod)));
        // A missing value compares as "".
        assert!(fsel("spec.nodeName=").matches(getter(&pod)));
        assert!(!fsel("spec.nodeName!=").matches(getter(&pod)));
        assert!(fsel("spec.nodeName!=node-1").matches(getter(&pod)));
        // Empty terms are skipped, and so is a bare operator.
        assert!(fsel(",metadata.name=web-0,").matches(getter(&pod)));
        assert!(fsel("=").matches_everything());
        assert!(fsel("!=,").matches_everything());
    }

    #[test]
    fn field_selector_escapes() {
        let f = fsel(r"metadata.name=a\,b\=c\\d");
        assert_eq!(f.single_equality("metadata.name"), Some(r"a,b=c\d"));
        assert!(f.matches(getter(&[("metadata.name", r"a,b=c\d")])));
        assert_eq!(f.to_string(), r"metadata.name=a\,b\=c\\d");
        // An escaped comma does not split terms.
        assert_eq!(fsel(r"a=x\,y,b=z").fields().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(FieldSelector::parse(r"a=b\x"), Err(SelectorError::FieldEscape(r"\x".to_owned())));
        assert_eq!(FieldSelector::parse(r"a=b\"), Err(SelectorError::FieldEscape(r"\".to_owned())));
        assert_eq!(FieldSelector::parse("a=b=c"), Err(SelectorError::FieldUnescaped('=')));
        assert_eq!(FieldSelector::parse("a===b"), Err(SelectorError::FieldUnescaped('=')));
        assert_eq!(
            FieldSelector::parse(r"a=b\x").map_err(|e| e.to_string()),
            Err(r"invalid field selector: invalid escape sequence: \x".to_owned())
        );
    }

    #[test]
    fn field_selector_errors_and_shape() {
        assert_eq!(
            FieldSelector::parse("metadata.name=x,phase").map_err(|e| e.to_string()),
            Err("invalid selector: 'metadata.name=x,phase'; can't understand 'phase'".to_owned())
        );
        // The first operator splits; the field is taken literally.
        let f = fsel("a!=b");
        assert_eq!(f.terms().collect::<Vec<_>>(), [("a", FieldOperator::NotEquals, "b")]);
        let f = fsel(" a = b");
        assert_eq!(f.terms().collect::<Vec<_>>(), [(" a ", FieldOperator::Equals, " b")]);
        // Terms are sorted, so equal selectors compare equal and print canonically.
        assert_eq!(fsel("b=2,a=1"), fsel("a=1,b=2"));
        assert_eq!(fsel("b==2,a!=1").to_string(), "a!=1,b=2");
        assert_eq!(fsel("spec.x=1,metadata.name=n").fields().collect::<Vec<_>>(), ["metadata.name", "spec.x"]);
    }

    #[test]
    fn field_single_equality() {
        assert_eq!(fsel("metadata.name=x").single_equality("metadata.name"), Some("x"));
        assert_eq!(fsel("metadata.name==x").single_equality("metadata.name"), Some("x"));
        assert_eq!(fsel("metadata.name!=x").single_equality("metadata.name"), None);
        assert_eq!(fsel("metadata.namespace=x").single_equality("metadata.name"), None);
        let both = fsel("metadata.name=x,status.phase=Running");
        assert_eq!(both.single_equality("metadata.name"), Some("x"));
        assert_eq!(fsel("").single_equality("metadata.name"), None);
        assert_eq!(fsel("metadata.name=").single_equality("metadata.name"), Some(""));
    }

    #[test]
    fn never_panics_on_odd_input() {
        let inputs = [
            "",
            "!",
            "!!",
            "!=",
            "==",
            "=",
            "(",
            ")",
            ",",
            "a in",
            "a notin",
            "a in (",
            "a in ((",
            "in",
            "notin",
            "in in",
            "a > ",
            "a<",
            "é",
            "a=é",
            "\u{0}",
            "a\u{0}b",
            "a,!",
            "a==",
            "a===b",
            "a!==b",
            "k in (a,,,)",
            "x in (,)",
            "é in (ü)",
            "\\",
            "a=\\",
            "a=b\\,",
            "a=b,\\",
            "💥=💥",
            "a!=💥\\",
            "=,=,=",
            "a\u{2028}b",
        ];
        for s in inputs {
            let _ = LabelSelector::parse(s).map(|l| l.to_string());
            let _ = FieldSelector::parse(s).map(|f| f.to_string());
        }
    }
}
