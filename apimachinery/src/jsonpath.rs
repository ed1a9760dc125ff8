//! The JSONPath subset that CRD `additionalPrinterColumns` use.
//!
//! kube-apiserver renders a custom resource's printer columns by evaluating each
//! column's `jsonPath` with client-go's `util/jsonpath` (the kubectl `-o jsonpath`
//! dialect) and printing the first result. This module implements the part of that
//! dialect that column definitions use: field access, indexes, slices, wildcards,
//! recursive descent, unions and `[?(...)]` filters. Template features that make no
//! sense for a single column (literal text around `{...}`, `range`/`end`) are rejected
//! at parse time with an error that says what was not understood.
//!
//! Where client-go fails at evaluation time (an index out of range, a filter comparing a
//! string with a number, a field that is missing in a filter) the column ends up empty
//! either way; here those cases simply contribute no match, so evaluation never fails.
//!
//! Each step applies to every value the step before it selected, so recursive descents
//! and wildcards multiply: `..*..*..*` over an object nested a hundred levels deep
//! selects millions of values from a few kilobytes. Evaluation therefore counts the
//! values it selects and visits, filters included, and an expression that needs more
//! than [`MAX_EVAL_VALUES`] selects nothing, like the other failures above.

use std::cell::Cell;
use std::cmp::Ordering;
use std::fmt;

use serde_json::{Number, Value};

/// How deeply `[?(...)]` filters may nest inside each other. The parser recurses per
/// level, so the bound keeps hostile expressions from exhausting the stack.
const MAX_FILTER_NESTING: usize = 32;

/// How many values one evaluation may select and visit in all, over every step and
/// filter; past it the expression selects nothing. A printer column over an object of
/// a few megabytes stays far below it unless its steps multiply.
pub const MAX_EVAL_VALUES: usize = 100_000;

/// Why an expression could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSONPath {expr:?}: {message} (at offset {offset})")]
pub struct JsonPathError {
    expr: String,
    offset: usize,
    message: String,
}

impl JsonPathError {
    /// What was wrong, without the expression and position.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Byte offset into the expression where the problem was found.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// A compiled JSONPath expression such as `.spec.replicas`,
/// `.status.conditions[?(@.type=="Ready")].status`, `.spec.clusters[*].name`,
/// `.items[0]` or `{.metadata.name}` (the braces are optional).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    source: String,
    steps: Vec<Step>,
}

/// One step of a path, applied to every value the previous step produced.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name`, `['name']`: the member of an object.
    Field(String),
    /// `.*`, `[*]`: every member of an object or element of an array.
    Wildcard,
    /// `..`: the value itself and every object or array below it, in document order;
    /// the following step then picks from each of them (so `..name` finds every
    /// `name` member at any depth).
    Descendants,
    /// `[n]`; negative counts from the end.
    Index(i64),
    /// `[start:end]`; bounds may be omitted or negative.
    Slice(Option<i64>, Option<i64>),
    /// `[a,b,...]`: the results of each alternative, in order.
    Union(Vec<Step>),
    /// `[?(...)]`: the elements of an array that pass the filter.
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    /// `[?(@.k)]`: the path yields at least one value (even `null`).
    Exists(Vec<Step>),
    /// `[?(@.k == "v")]`
    Compare(Operand, CmpOp, Operand),
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `@` followed by steps, evaluated against the array element.
    Path(Vec<Step>),
    Literal(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl JsonPath {
    /// Compiles an expression. Surrounding whitespace and one pair of enclosing braces
    /// are ignored; a leading `$` or `@` stands for the object itself.
    pub fn parse(expr: &str) -> Result<Self, JsonPathError> {
        let mut p = Parser { src: expr, pos: 0, end: expr.trim_end().len(), depth: 0 };
        p.skip_ws();
        if p.peek() == Some('{') {
            if p.end - p.pos < 2 || !p.src[..p.end].ends_with('}') {
                return Err(p.error("unbalanced '{': the expression must end with '}'"));
            }
            p.pos += 1;
            p.end -= 1;
            p.end = p.pos + p.src[p.pos..p.end].trim_end().len();
            p.skip_ws();
        } else if p.src[..p.end].ends_with('}') {
            p.pos = p.end - 1;
            return Err(p.error("unbalanced '}'"));
        }
        if p.pos >= p.end {
            return Err(p.error("empty expression"));
        }
        let steps = p.parse_path(Context::Top)?;
        if p.pos < p.end {
            // parse_path only stops early inside filters; this is a safety net.
            return Err(p.error("unexpected trailing input"));
        }
        Ok(JsonPath { source: expr.to_owned(), steps })
    }

    /// All values the expression selects in `v`, in document order. A path that does
    /// not exist yields nothing; a member that exists with value `null` yields `null`.
    /// So does an expression whose evaluation would take more than [`MAX_EVAL_VALUES`]
    /// values.
    pub fn eval<'a>(&self, v: &'a Value) -> Vec<&'a Value> {
        let budget = Budget(Cell::new(Some(MAX_EVAL_VALUES)));
        let out = eval_steps(&self.steps, vec![v], &budget);
        if budget.spent() {
            Vec::new()
        } else {
            out
        }
    }

    /// The expression as it was given to [`JsonPath::parse`].
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

/// Where a path is being parsed: at the top level whitespace between steps is
/// skipped (as client-go does); inside a filter a path ends at the first character
/// that cannot continue it, such as an operator or `)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Top,
    Filter,
}

struct Parser<'s> {
    src: &'s str,
    /// Byte offset of the next character; always on a character boundary.
    pos: usize,
    /// Parsing stops here (the closing brace and trailing whitespace are excluded).
    end: usize,
    /// Current filter nesting.
    depth: usize,
}

/// Characters that end an unquoted member name. A backslash makes the next character
/// part of the name, so `.metadata.labels.app\.kubernetes\.io/name` is one name with
/// dots in it.
fn is_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}' | '(' | ')' | '=' | '!' | '<' | '>' | '\'' | '"')
}

impl<'s> Parser<'s> {
    fn rest(&self) -> &'s str {
        self.src.get(self.pos..self.end).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn error(&self, message: impl Into<String>) -> JsonPathError {
        self.error_at(self.pos, message)
    }

    fn error_at(&self, offset: usize, message: impl Into<String>) -> JsonPathError {
        JsonPathError { expr: self.src.to_owned(), offset, message: message.into() }
    }

    fn parse_path(&mut self, ctx: Context) -> Result<Vec<Step>, JsonPathError> {
        let mut steps = Vec::new();
        if ctx == Context::Top && matches!(self.peek(), Some('$' | '@')) {
            self.bump();
        }
        loop {
            if ctx == Context::Top {
                self.skip_ws();
            }
            let Some(c) = self.peek() else {
                return Ok(steps);
            };
            match c {
                '.' if self.peek_second() == Some('.') => {
                    self.pos += 2;
                    steps.push(Step::Descendants);
                    match self.peek() {
                        // The bracket is parsed by the next loop iteration.
                        Some('[') => {}
                        Some('*') => {
                            self.bump();
                            steps.push(Step::Wildcard);
                        }
                        Some(c) if !is_terminator(c) => steps.push(self.parse_name()?),
                        _ => return Err(self.error("recursive descent '..' must be followed by a name, '*' or '['")),
                    }
                }
                '.' => {
                    self.bump();
                    // A lone '.' (the whole object, or before a bracket) adds no step.
                    if self.peek().is_some_and(|c| !is_terminator(c)) {
                        steps.push(self.parse_name()?);
                    }
                }
                '[' => steps.push(self.parse_bracket()?),
                _ if ctx == Context::Filter => return Ok(steps),
                '{' | '}' => return Err(self.error(format!("unexpected '{c}': only a single {{...}} expression is supported"))),
                _ => return Err(self.error(format!("unexpected character {c:?}; expected '.', '..' or '['"))),
            }
        }
    }

    /// Reads an unquoted member name; an unescaped `*` on its own is the wildcard.
    fn parse_name(&mut self) -> Result<Step, JsonPathError> {
        let mut name = String::new();
        let mut escaped = false;
        while let Some(c) = self.peek() {
            if c == '\\' {
                self.bump();
                match self.bump() {
                    Some(next) => name.push(next),
                    None => return Err(self.error("dangling '\\' at the end of a name")),
                }
                escaped = true;
            } else if is_terminator(c) {
                break;
            } else {
                self.bump();
                name.push(c);
            }
        }
        if !escaped && name == "*" {
            Ok(Step::Wildcard)
        } else {
            Ok(Step::Field(name))
        }
    }

    /// Reads `[...]`: a filter, or one or more comma-separated indexes, slices,
    /// quoted names or `*`.
    fn parse_bracket(&mut self) -> Result<Step, JsonPathError> {
        let open = self.pos;
        self.bump();
        self.skip_ws();
        if self.eat('?') {
            self.skip_ws();
            if !self.eat('(') {
                return Err(self.error("expected '(' after '[?'"));
            }
            if self.depth >= MAX_FILTER_NESTING {
                return Err(self.error("filters are nested too deeply"));
            }
            self.depth += 1;
            let filter = self.parse_filter()?;
            self.depth -= 1;
            self.skip_ws();
            if !self.eat(')') {
                return Err(self.error("expected ')' to close the filter"));
            }
            self.skip_ws();
            if !self.eat(']') {
                return Err(self.error("expected ']' after the filter"));
            }
            return Ok(Step::Filter(Box::new(filter)));
        }
        let mut alternatives = Vec::new();
        loop {
            self.skip_ws();
            alternatives.push(self.parse_bracket_element(open)?);
            self.skip_ws();
            let at = self.pos;
            match self.bump() {
                Some(',') => {}
                Some(']') => break,
                Some(c) => return Err(self.error_at(at, format!("expected ',' or ']', found {c:?}"))),
                None => return Err(self.error_at(open, "unterminated '['")),
            }
        }
        if alternatives.len() == 1 {
            if let Some(step) = alternatives.pop() {
                return Ok(step);
            }
        }
        Ok(Step::Union(alternatives))
    }

    fn parse_bracket_element(&mut self, open: usize) -> Result<Step, JsonPathError> {
        match self.peek() {
            Some('*') => {
                self.bump();
                Ok(Step::Wildcard)
            }
            Some('\'' | '"') => Ok(Step::Field(self.parse_string()?)),
            Some(c) if c == '-' || c == '+' || c == ':' || c.is_ascii_digit() => self.parse_index_or_slice(),
            Some('?') => Err(self.error("a filter must be alone in its brackets")),
            None => Err(self.error_at(open, "unterminated '['")),
            Some(c) => Err(self.error(format!("unexpected {c:?} in brackets; expected an index, a slice, '*', a quoted name or a filter"))),
        }
    }

    fn parse_index_or_slice(&mut self) -> Result<Step, JsonPathError> {
        let start = self.parse_optional_int()?;
        self.skip_ws();
        if !self.eat(':') {
            return match start {
                Some(i) => Ok(Step::Index(i)),
                None => Err(self.error("expected an array index")),
            };
        }
        self.skip_ws();
        let end = self.parse_optional_int()?;
        self.skip_ws();
        if self.peek() == Some(':') {
            return Err(self.error("slice steps ([start:end:step]) are not supported"));
        }
        Ok(Step::Slice(start, end))
    }

    fn parse_optional_int(&mut self) -> Result<Option<i64>, JsonPathError> {
        let start = self.pos;
        let signed = matches!(self.peek(), Some('-' | '+'));
        if signed {
            self.bump();
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        let text = self.src.get(start..self.pos).unwrap_or("");
        if text.is_empty() {
            return Ok(None);
        }
        if signed && text.len() == 1 {
            return Err(self.error("expected digits after the sign"));
        }
        text.parse::<i64>().map(Some).map_err(|_| self.error_at(start, format!("array index {text} is out of range")))
    }

    /// Reads the inside of `[?( ... )]`, up to (not including) the closing `)`.
    fn parse_filter(&mut self) -> Result<Filter, JsonPathError> {
        self.skip_ws();
        let left_at = self.pos;
        let left = self.parse_operand()?;
        self.skip_ws();
        if self.peek() == Some(')') {
            return match left {
                Operand::Path(path) => Ok(Filter::Exists(path)),
                Operand::Literal(_) => Err(self.error_at(left_at, "a filter needs an '@' path, optionally compared with a value")),
            };
        }
        let op = self.parse_operator()?;
        self.skip_ws();
        let right = self.parse_operand()?;
        Ok(Filter::Compare(left, op, right))
    }

    fn parse_operator(&mut self) -> Result<CmpOp, JsonPathError> {
        let rest = self.rest();
        let (op, len) = if rest.starts_with("==") {
            (CmpOp::Eq, 2)
        } else if rest.starts_with("!=") {
            (CmpOp::Ne, 2)
        } else if rest.starts_with("<=") {
            (CmpOp::Le, 2)
        } else if rest.starts_with(">=") {
            (CmpOp::Ge, 2)
        } else if rest.starts_with('<') {
            (CmpOp::Lt, 1)
        } else if rest.starts_with('>') {
            (CmpOp::Gt, 1)
        } else if rest.starts_with('=') {
            return Err(self.error("use '==' to compare"));
        } else if rest.is_empty() {
            return Err(self.error("unterminated filter"));
        } else {
            return Err(self.error("expected a comparison operator (==, !=, <, <=, >, >=) or ')' to end the filter"));
        };
        self.pos += len;
        Ok(op)
    }

    fn parse_operand(&mut self) -> Result<Operand, JsonPathError> {
        match self.peek() {
            Some('@') => {
                self.bump();
                Ok(Operand::Path(self.parse_path(Context::Filter)?))
            }
            Some('$') => Err(self.error("'$' is not supported inside a filter; use '@' for the element being tested")),
            Some('\'' | '"') => Ok(Operand::Literal(Value::String(self.parse_string()?))),
            Some(c) if c == '-' || c == '+' || c.is_ascii_digit() => Ok(Operand::Literal(Value::Number(self.parse_number()?))),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    self.bump();
                }
                match self.src.get(start..self.pos).unwrap_or("") {
                    "true" => Ok(Operand::Literal(Value::Bool(true))),
                    "false" => Ok(Operand::Literal(Value::Bool(false))),
                    word => {
                        Err(self
                            .error_at(start, format!("unsupported literal {word:?}; expected a quoted string, a number, true or false")))
                    }
                }
            }
            None => Err(self.error("unterminated filter")),
            Some(c) => Err(self.error(format!("unexpected {c:?} in filter"))),
        }
    }

    fn parse_number(&mut self) -> Result<Number, JsonPathError> {
        let start = self.pos;
        if matches!(self.peek(), Some('-' | '+')) {
            self.bump();
        }
        let digits = |p: &mut Self| {
            let mut any = false;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.bump();
                any = true;
            }
            any
        };
        let mut any_digits = digits(self);
        let mut float = false;
        if self.eat('.') {
            float = true;
            any_digits |= digits(self);
        }
        if any_digits && matches!(self.peek(), Some('e' | 'E')) {
            float = true;
            self.bump();
            if matches!(self.peek(), Some('-' | '+')) {
                self.bump();
            }
            if !digits(self) {
                return Err(self.error("expected digits in the exponent"));
            }
        }
        let text = self.src.get(start..self.pos).unwrap_or("");
        if !any_digits {
            return Err(self.error_at(start, format!("invalid number {text:?}")));
        }
        if !float {
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Number::from(i));
            }
        }
        text.parse::<f64>().ok().and_then(Number::from_f64).ok_or_else(|| self.error_at(start, format!("invalid number {text:?}")))
    }

    /// Reads a single- or double-quoted string with JSON-style backslash escapes.
    fn parse_string(&mut self) -> Result<String, JsonPathError> {
        let start = self.pos;
        let Some(quote) = self.bump() else {
            return Err(self.error("expected a quoted string"));
        };
        let mut out = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.error_at(start, "unterminated quoted string"));
            };
            if c == quote {
                return Ok(out);
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let at = self.pos;
            let unescaped = match self.bump() {
                Some(c @ ('\\' | '\'' | '"' | '/')) => c,
                Some('n') => '\n',
                Some('t') => '\t',
                Some('r') => '\r',
                Some('b') => '\u{8}',
                Some('f') => '\u{c}',
                Some('u') => {
                    let hex = self.src.get(self.pos..self.end).and_then(|r| r.get(..4));
                    let ch = hex
                        .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .and_then(char::from_u32);
                    match ch {
                        Some(ch) => {
                            self.pos += 4;
                            ch
                        }
                        None => return Err(self.error_at(at, "invalid \\u escape (expected four hex digits, not a surrogate)")),
                    }
                }
                Some(other) => return Err(self.error_at(at, format!("unknown escape sequence \\{other}"))),
                None => return Err(self.error_at(start, "unterminated quoted string")),
            };
            out.push(unescaped);
        }
    }
}

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------

/// What is left of an evaluation's [`MAX_EVAL_VALUES`]; `None` once it ran out.
struct Budget(Cell<Option<usize>>);

impl Budget {
    /// Takes `n` values from the budget; false (for good) once it runs out.
    fn spend(&self, n: usize) -> bool {
        let left = self.0.get().and_then(|left| left.checked_sub(n));
        self.0.set(left);
        left.is_some()
    }

    fn spent(&self) -> bool {
        self.0.get().is_none()
    }
}

fn eval_steps<'a>(steps: &[Step], start: Vec<&'a Value>, budget: &Budget) -> Vec<&'a Value> {
    let mut current = start;
    for step in steps {
        if current.is_empty() {
            break;
        }
        let mut next = Vec::new();
        for v in current {
            let before = next.len();
            apply(step, v, &mut next, budget);
            if !budget.spend(next.len() - before) {
                return Vec::new();
            }
        }
        current = next;
    }
    current
}

fn apply<'a>(step: &Step, v: &'a Value, out: &mut Vec<&'a Value>, budget: &Budget) {
    match step {
        Step::Field(name) => {
            if let Some(x) = v.as_object().and_then(|m| m.get(name)) {
                out.push(x);
            }
        }
        Step::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Step::Descendants => descendants(v, out, budget),
        Step::Index(i) => {
            if let Value::Array(a) = v {
                if let Some(x) = resolve_index(*i, a.len()).and_then(|i| a.get(i)) {
                    out.push(x);
                }
            }
        }
        Step::Slice(start, end) => {
            if let Value::Array(a) = v {
                let (s, e) = slice_bounds(*start, *end, a.len());
                if let Some(items) = a.get(s..e) {
                    out.extend(items.iter());
                }
            }
        }
        Step::Union(alternatives) => {
            for alt in alternatives {
                apply(alt, v, out, budget);
            }
        }
        Step::Filter(filter) => {
            if let Value::Array(a) = v {
                for el in a {
                    // Each element tested costs one, whatever the filter's own steps cost.
                    if !budget.spend(1) {
                        return;
                    }
                    if filter.accepts(el, budget) {
                        out.push(el);
                    }
                }
            }
        }
    }
}

/// Pushes `v` and every non-empty object or array beneath it in document (pre-)order.
/// Uses an explicit stack so that deeply nested documents cannot overflow the call
/// stack. Scalars and empty containers are left out because no following step can
/// select anything from them. Each value visited costs one of the budget; the walk
/// stops when it runs out.
fn descendants<'a>(v: &'a Value, out: &mut Vec<&'a Value>, budget: &Budget) {
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        if !budget.spend(1) {
            return;
        }
        let children: Vec<&'a Value> = match x {
            Value::Object(m) if !m.is_empty() => m.values().collect(),
            Value::Array(a) if !a.is_empty() => a.iter().collect(),
            _ => continue,
        };
        out.push(x);
        stack.extend(children.into_iter().rev());
    }
}

/// An index into an array of `len` elements; negative indexes count from the end.
fn resolve_index(i: i64, len: usize) -> Option<usize> {
    let len = i128::try_from(len).ok()?;
    let idx = if i < 0 { len + i128::from(i) } else { i128::from(i) };
    if (0..len).contains(&idx) {
        usize::try_from(idx).ok()
    } else {
        None
    }
}

/// Clamps `[start:end]` to the array, treating negative bounds as counted from the
/// end; an empty or inverted range yields `(s, s)`.
fn slice_bounds(start: Option<i64>, end: Option<i64>, len: usize) -> (usize, usize) {
    let clamp = |bound: Option<i64>, default: usize| -> usize {
        let Some(b) = bound else { return default };
        let n = i128::try_from(len).unwrap_or(i128::MAX);
        let b = i128::from(b);
        let b = if b < 0 { n + b } else { b };
        usize::try_from(b.clamp(0, n)).unwrap_or(len)
    };
    let s = clamp(start, 0);
    let e = clamp(end, len);
    (s, e.max(s))
}

impl Filter {
    fn accepts(&self, element: &Value, budget: &Budget) -> bool {
        match self {
            Filter::Exists(path) => !eval_steps(path, vec![element], budget).is_empty(),
            Filter::Compare(left, op, right) => {
                match (operand_value(left, element, budget), operand_value(right, element, budget)) {
                    (Some(l), Some(r)) => compare(*op, l, r),
                    // A side that is missing (or yields several values) matches nothing.
                    _ => false,
                }
            }
        }
    }
}

fn operand_value<'v>(operand: &'v Operand, element: &'v Value, budget: &Budget) -> Option<&'v Value> {
    match operand {
        Operand::Literal(v) => Some(v),
        Operand::Path(path) => match eval_steps(path, vec![element], budget).as_slice() {
            [single] => Some(*single),
            _ => None,
        },
    }
}

/// Numbers compare by value (so `3 == 3.0`), strings by bytes; booleans, nulls, arrays
/// and objects only support `==` / `!=`. Values of different types are never equal and
/// never ordered.
fn compare(op: CmpOp, l: &Value, r: &Value) -> bool {
    let ordering = match (l, r) {
        (Value::Number(a), Value::Number(b)) => compare_numbers(a, b),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    let equal = match ordering {
        Some(o) => o == Ordering::Equal,
        None => l == r,
    };
    match op {
        CmpOp::Eq => equal,
        CmpOp::Ne => !equal,
        CmpOp::Lt => ordering == Some(Ordering::Less),
        CmpOp::Le => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        CmpOp::Gt => ordering == Some(Ordering::Greater),
        CmpOp::Ge => matches!(ordering, Some(Ordering::Greater | Ordering::Equal)),
    }
}

fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return Some(x.cmp(&y));
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return Some(x.cmp(&y));
    }
    a.as_f64()?.partial_cmp(&b.as_f64()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "metadata": {
                "name": "web",
                "labels": {"app.kubernetes.io/name": "web-app", "tier-x": "front"}
            },
            "spec": {
                "replicas": 3,
                "clusters": [{"name": "a", "weight": 1}, {"name": "b", "weight": 2}],
                "ports": [{"port": 80, "tls": false}, {"port": 443, "tls": true}],
                "tags": ["x", "y", "x"],
                "empty": [],
                "nothing": null
            },
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "AllGood"},
                    {"type": "Synced", "status": "False"}
                ]
            }
        })
    }

    fn path(expr: &str) -> JsonPath {
        match JsonPath::parse(expr) {
            Ok(p) => p,
            Err(e) => panic!("{expr:?} should parse: {e}"),
        }
    }

    /// Evaluates against `doc()` and returns the results as owned JSON.
    fn run(expr: &str) -> Vec<Value> {
        let d = doc();
        path(expr).eval(&d).into_iter().cloned().collect()
    }

    fn parse_err(expr: &str) -> JsonPathError {
        match JsonPath::parse(expr) {
            Ok(p) => panic!("{expr:?} should not parse, got {p:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn nested_fields() {
        assert_eq!(run(".spec.replicas"), [json!(3)]);
        assert_eq!(run("{.metadata.name}"), [json!("web")]);
        assert_eq!(run("  { .metadata.name }  "), [json!("web")]);
        assert_eq!(run("$.metadata.name"), [json!("web")]);
        assert_eq!(run("{$.metadata.name}"), [json!("web")]);
        assert_eq!(run(".metadata.labels.tier-x"), [json!("front")]);
        assert_eq!(run(r".metadata.labels.app\.kubernetes\.io/name"), [json!("web-app")]);
        assert_eq!(run(".metadata.labels['app.kubernetes.io/name']"), [json!("web-app")]);
        assert_eq!(run(r#".metadata["labels"]["tier-x"]"#), [json!("front")]);
        assert_eq!(run("['metadata'].name"), [json!("web")]);
        assert_eq!(run("$"), [doc()]);
        assert_eq!(run("."), [doc()]);
    }

    #[test]
    fn missing_paths_yield_nothing() {
        assert!(run(".spec.nope").is_empty());
        assert!(run(".spec.nope.deeper[0]").is_empty());
        assert!(run(".metadata.name.length").is_empty());
        assert!(run(".spec.clusters.name").is_empty());
        assert!(run(".spec.replicas[0]").is_empty());
        assert!(run(".spec.nothing.x").is_empty());
        assert!(run(".spec.empty[*]").is_empty());
        // A member that is present but null is a result.
        assert_eq!(run(".spec.nothing"), [Value::Null]);
    }

    #[test]
    fn indexes_and_slices() {
        assert_eq!(run(".spec.clusters[0].name"), [json!("a")]);
        assert_eq!(run(".spec.clusters[1].name"), [json!("b")]);
        assert_eq!(run(".spec.clusters[-1].name"), [json!("b")]);
        assert_eq!(run(".spec.clusters[-2].name"), [json!("a")]);
        assert!(run(".spec.clusters[2]").is_empty());
        assert!(run(".spec.clusters[-3]").is_empty());
        assert!(run(".metadata[0]").is_empty());
        assert_eq!(run(".spec.tags[0:2]"), [json!("x"), json!("y")]);
        assert_eq!(run(".spec.tags[1:]"), [json!("y"), json!("x")]);
        assert_eq!(run(".spec.tags[-1:]"), [json!("x")]);
        assert_eq!(run(".spec.tags[:-2]"), [json!("x")]);
        assert_eq!(run(".spec.tags[:100]").len(), 3);
        assert!(run(".spec.tags[2:1]").is_empty());
        assert_eq!(run(".spec.tags[ 1 ]"), [json!("y")]);
    }

    #[test]
    fn wildcards_and_unions() {
        assert_eq!(run(".spec.clusters[*].name"), [json!("a"), json!("b")]);
        assert_eq!(run(".spec.clusters.*.name"), [json!("a"), json!("b")]);
        assert_eq!(run(".metadata.labels.*"), [json!("web-app"), json!("front")]);
        assert_eq!(run(".metadata.labels[*]"), [json!("web-app"), json!("front")]);
        assert_eq!(run(".spec.clusters[1,0].name"), [json!("b"), json!("a")]);
        assert_eq!(run(".metadata['name', 'missing']"), [json!("web")]);
    }

    #[test]
    fn recursive_descent() {
        assert_eq!(run("..name"), [json!("web"), json!("a"), json!("b")]);
        assert_eq!(run("..weight"), [json!(1), json!(2)]);
        // Document order: the top-level status object comes before the conditions' ones.
        let statuses = run("..status");
        assert_eq!(statuses.len(), 3);
        assert!(statuses[0].is_object());
        assert_eq!(statuses[1..], [json!("True"), json!("False")]);
        assert_eq!(run(".spec.clusters..name"), [json!("a"), json!("b")]);
        assert_eq!(run("..clusters[0].name"), [json!("a")]);
        assert_eq!(run(".spec.tags..*"), [json!("x"), json!("y"), json!("x")]);
    }

    #[test]
    fn filters_on_conditions() {
        assert_eq!(run(r#".status.conditions[?(@.type=="Ready")].status"#), [json!("True")]);
        assert_eq!(run(".status.conditions[?(@.type=='Ready')].status"), [json!("True")]);
        assert_eq!(run(r#"{.status.conditions[?(@.type == "Synced")].status}"#), [json!("False")]);
        assert_eq!(run(r#".status.conditions[?(@.type!="Ready")].type"#), [json!("Synced")]);
        assert!(run(r#".status.conditions[?(@.type=="Gone")].status"#).is_empty());
        // Existence.
        assert_eq!(run(".status.conditions[?(@.reason)].type"), [json!("Ready")]);
        // A missing left side matches nothing, for != too.
        assert!(run(r#".status.conditions[?(@.nope!="x")]"#).is_empty());
        // Quotes and parentheses inside string literals.
        let d = json!({"items": [{"n": "a)b"}, {"n": "it's"}]});
        assert_eq!(path(r#".items[?(@.n=="a)b")].n"#).eval(&d), [&json!("a)b")]);
        assert_eq!(path(r".items[?(@.n=='it\'s')].n").eval(&d), [&json!("it's")]);
    }

    #[test]
    fn filters_with_numbers_and_booleans() {
        assert_eq!(run(".spec.clusters[?(@.weight>1)].name"), [json!("b")]);
        assert_eq!(run(".spec.clusters[?(@.weight>=1)].name"), [json!("a"), json!("b")]);
        assert_eq!(run(".spec.clusters[?(@.weight<2)].name"), [json!("a")]);
        assert_eq!(run(".spec.clusters[?(@.weight<=-1)].name"), Vec::<Value>::new());
        assert_eq!(run(".spec.ports[?(@.port==443.0)].tls"), [json!(true)]);
        assert_eq!(run(".spec.ports[?(@.port==4.43e2)].tls"), [json!(true)]);
        assert_eq!(run(".spec.ports[?(@.tls==true)].port"), [json!(443)]);
        assert_eq!(run(".spec.ports[?(@.tls!=true)].port"), [json!(80)]);
        // Different types are never equal.
        assert!(run(r#".spec.ports[?(@.port=="80")]"#).is_empty());
        assert_eq!(run(r#".spec.ports[?(@.port!="80")].port"#), [json!(80), json!(443)]);
        assert!(run(".spec.ports[?(@.tls>false)]").is_empty());
        // '@' alone is the element; literals may be on the left.
        assert_eq!(run(".spec.tags[?(@=='x')]"), [json!("x"), json!("x")]);
        assert_eq!(run(r#".spec.tags[?("y"==@)]"#), [json!("y")]);
        // Comparing two paths of the element.
        let d = json!({"xs": [{"a": 1, "b": 1}, {"a": 1, "b": 2}]});
        assert_eq!(path(".xs[?(@.a==@.b)].b").eval(&d), [&json!(1)]);
        // Nested filters.
        let d = json!({"xs": [{"ys": [{"k": 1}]}, {"ys": [{"k": 2}]}]});
        assert_eq!(path(".xs[?(@.ys[?(@.k==2)])].ys[0].k").eval(&d), [&json!(2)]);
        // Filters only apply to arrays.
        assert!(run(".metadata[?(@.name)]").is_empty());
    }

    #[test]
    fn parse_errors() {
        let bad = [
            "",
            "   ",
            "{}",
            "{.a",
            ".a}",
            "{.a}{.b}",
            "{.a} text",
            ".a[",
            ".a[0",
            ".a[abc]",
            ".a[]",
            ".a[-]",
            ".a[1:2:3]",
            ".a[99999999999999999999]",
            r#".a[?(@.x=="y")"#,
            r#".a[?(@.x=="y"]"#,
            r#".a[?(@.x="y")]"#,
            r#".a[?(@.x==)]"#,
            r#".a[?(@.x=="unterminated)]"#,
            ".a[?(@.x==nul)]",
            ".a[?($.x==1)]",
            ".a[?('lit')]",
            ".a[?(@.x ~ 1)]",
            ".a[?@.x]",
            ".a[0,?(@.x)]",
            "..",
            ".a..",
            "...a",
            ".a b",
            "a.b",
            "range .items",
            r".a\",
            r#".a["\q"]"#,
            r#".a["\ud800"]"#,
        ];
        for expr in bad {
            let e = parse_err(expr);
            assert!(!e.message().is_empty(), "{expr:?}");
            assert!(e.offset() <= expr.len(), "{expr:?}: {e}");
        }
        let e = parse_err(r#".a[?(@.x="y")]"#);
        assert_eq!(e.message(), "use '==' to compare");
        assert_eq!(e.offset(), 8);
        assert!(e.to_string().contains(r#"invalid JSONPath ".a[?(@.x=\"y\")]""#), "{e}");
        assert!(parse_err(".a[1:2:3]").message().contains("not supported"));
        assert!(parse_err("{.a}{.b}").message().contains("single"));
    }

    #[test]
    fn deep_nesting_is_rejected_not_fatal() {
        let expr = format!(".a{}", "[?(@".repeat(1000));
        assert!(parse_err(&expr).message().contains("nested too deeply"));
        let ok = format!(".a{}{}", "[?(@.b".repeat(3), ")]".repeat(3));
        assert!(JsonPath::parse(&ok).is_ok());
        // A deeply nested document is walked without recursion.
        // Built by hand: json!() would serialize the inner value recursively.
        let mut v = json!({"name": "leaf"});
        for _ in 0..10_000 {
            let mut m = serde_json::Map::new();
            m.insert("c".to_owned(), Value::Array(vec![v]));
            v = Value::Object(m);
        }
        assert_eq!(path("..name").eval(&v), [&json!("leaf")]);
        // Dropping a deeply nested serde_json::Value recurses; leak it instead.
        std::mem::forget(v);
    }

    #[test]
    fn never_panics_on_odd_input() {
        let inputs = [
            "[",
            "]",
            "{",
            "}",
            "{{}}",
            "$$",
            "@",
            "@.",
            ".[",
            ".[0",
            "..[",
            "..[*]",
            "['",
            "['a",
            "[\"a\\",
            "[?(",
            "[?(@",
            "[?(@.a",
            "[?(@.a==",
            "[?(@.a=='",
            "[?(@.a==1",
            "[?(@.a==1)",
            "[?(@.a==1)",
            "[?(-)]",
            "[?(1e)]",
            "[?(1e+)]",
            "[?(.5)]",
            "[?(+)]",
            "[:]",
            "[::]",
            "[-:-]",
            "é",
            ".é",
            "[é]",
            ".a\u{0}",
            "[?(@.a=='\\u12')]",
            "[?(@.a=='\\u')]",
            "💥",
            ".💥[0]",
            "[?(@.a==\"\\u00e9\")]",
            "[ , ]",
            "[0,]",
            "[,0]",
            ".\\",
            "..\\",
        ];
        let d = doc();
        for expr in inputs {
            if let Ok(p) = JsonPath::parse(expr) {
                let _ = p.eval(&d);
                let _ = p.to_string();
            }
        }
        // "[:]" is the whole array, like "[*]".
        assert_eq!(path(".spec.tags[:]").eval(&d).len(), 3);
    }

    #[test]
    fn evaluation_that_multiplies_past_the_budget_selects_nothing() {
        // Found by tests/fuzz.rs: each `..` multiplies what the steps before it selected,
        // so over a value nested 120 levels deep this selects hundreds of millions.
        let mut deep = json!("leaf");
        for _ in 0..120 {
            deep = json!([{ "a": deep }]);
        }
        let start = std::time::Instant::now();
        assert!(path("..[*]..*..*..a").eval(&deep).is_empty());
        assert!(path(".x[?(@..*..*..*)]").eval(&json!({ "x": [deep.clone(), deep.clone()] })).is_empty());
        assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
        // What stays within it is unchanged: one `..` over the same value.
        assert_eq!(path("..a").eval(&deep).len(), 120);
        let wide = json!({ "items": (0..MAX_EVAL_VALUES / 2).collect::<Vec<_>>() });
        assert_eq!(path(".items[*]").eval(&wide).len(), MAX_EVAL_VALUES / 2);
    }
}
