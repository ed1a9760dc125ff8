//! Patch semantics: strategic merge patch, server-side apply field ownership, and the
//! list/map metadata both depend on. JSON patch and merge patch come from `json-patch`.

pub mod apply;
pub mod meta;
pub mod strategic;
