//! Pipeline ids and lists of them, shared rather than copied.
//!
//! A Core Hub may run 100,000 pipelines, and the same ids sit in many places at once: the ledger
//! (`status.pausedPipelines`), the update's asked and resumed lists, the last attempt, the work handed to
//! the Core Hub worker and what it reports back. A [`PipelineId`] is one shared copy of an id (cloning it
//! copies a pointer; a thin one, 8 bytes, its length beside the text: every list and set of ids costs half
//! of what a `&str` or an `Arc<str>` would), and a [`PipelineList`] is one shared list (cloning it copies a pointer; changing a
//! shared list copies the pointers, never the ids). Both read and write as plain JSON strings and arrays:
//! the status and the CRD are the same as with `String` and `Vec<String>`.

use std::{borrow::Borrow, fmt, ops::Deref, sync::Arc};

use arcstr::ArcStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One pipeline id, as Core Hub names it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PipelineId(ArcStr);

impl PipelineId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for PipelineId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for PipelineId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for PipelineId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for PipelineId {
    fn from(s: &str) -> Self {
        PipelineId(ArcStr::from(s))
    }
}

impl From<String> for PipelineId {
    fn from(s: String) -> Self {
        PipelineId(ArcStr::from(s))
    }
}

impl From<&String> for PipelineId {
    fn from(s: &String) -> Self {
        PipelineId(ArcStr::from(s.as_str()))
    }
}

impl PartialEq<str> for PipelineId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for PipelineId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for PipelineId {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl fmt::Display for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for PipelineId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PipelineId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PipelineId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a pipeline id (a string)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PipelineId, E> {
                Ok(PipelineId::from(v))
            }
        }
        d.deserialize_str(Visitor)
    }
}

impl JsonSchema for PipelineId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "String".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(g)
    }
}

/// A list of pipeline ids, shared until it is changed (then the changed copy is this list's own).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PipelineList(Arc<Vec<PipelineId>>);

impl PipelineList {
    pub fn new() -> Self {
        Self::default()
    }

    /// Also what `skip_serializing_if` asks.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This list's own ids, to change: copied (the pointers, not the ids) when another list shares them.
    pub fn make_mut(&mut self) -> &mut Vec<PipelineId> {
        Arc::make_mut(&mut self.0)
    }

    pub fn push(&mut self, id: impl Into<PipelineId>) {
        self.make_mut().push(id.into());
    }

    /// Keeps the ids `keep` says yes to (each asked once); a list that keeps every id is not copied.
    pub fn retain(&mut self, mut keep: impl FnMut(&PipelineId) -> bool) {
        let Some(first) = self.0.iter().position(|id| !keep(id)) else {
            return;
        };
        let mut i = 0;
        self.make_mut().retain(|id| {
            let k = i != first && (i < first || keep(id));
            i += 1;
            k
        });
    }

    pub fn clear(&mut self) {
        if !self.0.is_empty() {
            self.0 = Arc::default();
        }
    }

    /// True when both are the same shared list (then they are equal without looking at the ids).
    pub fn shares(&self, other: &PipelineList) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for PipelineList {
    type Target = [PipelineId];
    fn deref(&self) -> &[PipelineId] {
        &self.0
    }
}

impl<T: Into<PipelineId>> Extend<T> for PipelineList {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        let mut iter = iter.into_iter().peekable();
        if iter.peek().is_some() {
            self.make_mut().extend(iter.map(Into::into));
        }
    }
}

impl<T: Into<PipelineId>> FromIterator<T> for PipelineList {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        PipelineList(Arc::new(iter.into_iter().map(Into::into).collect()))
    }
}

impl<T: Into<PipelineId>> From<Vec<T>> for PipelineList {
    fn from(v: Vec<T>) -> Self {
        v.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a PipelineList {
    type Item = &'a PipelineId;
    type IntoIter = std::slice::Iter<'a, PipelineId>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> PartialEq<Vec<T>> for PipelineList
where
    PipelineId: PartialEq<T>,
{
    fn eq(&self, other: &Vec<T>) -> bool {
        self[..] == other[..]
    }
}

impl<T, const N: usize> PartialEq<[T; N]> for PipelineList
where
    PipelineId: PartialEq<T>,
{
    fn eq(&self, other: &[T; N]) -> bool {
        self[..] == other[..]
    }
}

impl fmt::Debug for PipelineList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl Serialize for PipelineList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for PipelineList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<PipelineId>::deserialize(d).map(|v| PipelineList(Arc::new(v)))
    }
}

impl JsonSchema for PipelineList {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Array_of_String".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Vec::<String>::json_schema(g)
    }
}

/// A set of ids to ask about, made once and only read: the ids sorted, each once, in a list exactly as
/// long as they are (8 bytes an id: no tree nodes, no hash table, no sort scratch). For 100,000 ids it is
/// a quarter of a `BTreeSet<&str>` at its peak.
#[derive(Debug, Default)]
pub struct IdSet<'a>(Vec<&'a PipelineId>);

impl<'a> IdSet<'a> {
    /// The set of `ids` (an id given twice is in it once).
    pub fn new<I>(ids: I) -> Self
    where
        I: IntoIterator<Item = &'a PipelineId>,
        I::IntoIter: Clone,
    {
        let ids = ids.into_iter();
        let mut v = Vec::with_capacity(ids.clone().count());
        v.extend(ids);
        v.sort_unstable();
        v.dedup();
        IdSet(v)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.0.binary_search_by(|p| p.as_str().cmp(id)).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A stable digest of a list of ids (FNV-1a, 64 bits, the same in every build): tells a spilled list's
/// ConfigMap that matches the status from one left by a failed write, and names what a disaster-recovery
/// setup made.
pub fn digest(ids: &[impl AsRef<str>]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in ids {
        for b in id.as_ref().bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_as_strings_and_arrays() {
        let list: PipelineList = serde_json::from_str(r#"["a","b"]"#).unwrap();
        assert_eq!(list, vec!["a", "b"]);
        assert_eq!(serde_json::to_string(&list).unwrap(), r#"["a","b"]"#);
        assert!(serde_json::from_str::<PipelineList>(r#"["a",1]"#).is_err());
        let schema = serde_json::to_value(schemars::schema_for!(PipelineList)).unwrap();
        assert_eq!(schema["type"], "array");
        assert_eq!(schema["items"]["type"], "string");
    }

    #[test]
    fn an_id_set_holds_each_id_once() {
        let ids: Vec<PipelineId> = ["b", "a", "c", "a"]
            .into_iter()
            .map(PipelineId::from)
            .collect();
        let set = IdSet::new(&ids);
        assert_eq!(set.len(), 3);
        assert!(set.contains("a") && set.contains("b") && set.contains("c"));
        assert!(!set.contains("d") && !set.contains(""));
        assert!(IdSet::new(&ids[..0]).is_empty());
    }

    #[test]
    fn a_clone_shares_until_it_changes() {
        let a: PipelineList = ["x", "y", "z"].into_iter().collect();
        let mut b = a.clone();
        assert!(b.shares(&a));
        b.retain(|_| true);
        assert!(b.shares(&a), "a retain that keeps every id copies nothing");
        b.retain(|id| id != "y");
        assert!(!b.shares(&a));
        assert_eq!(a, vec!["x", "y", "z"]);
        assert_eq!(b, vec!["x", "z"]);
        // The ids themselves are still one copy each.
        assert!(ArcStr::ptr_eq(&a[0].0, &b[0].0));
        assert_eq!(std::mem::size_of::<PipelineId>(), 8);
    }
}
