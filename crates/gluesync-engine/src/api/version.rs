//! Versions and images: a component's version is its image tag cut at the first `-`, and versions are
//! dotted numbers compared part by part as numbers (`2.10.0 > 2.9.9`). Nothing is ever compared as text.

use std::{cmp::Ordering, fmt, str::FromStr};

/// A version made of dotted numbers. Trailing zero parts do not count (`2.3` equals `2.3.0`).
#[derive(Clone, Debug, Eq)]
pub struct Version {
    parts: Vec<u64>,
    text: String,
}

/// A version string that is not dotted numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("version {0:?} is not dotted numbers (for example 2.3.2.2)")]
pub struct BadVersion(pub String);

impl FromStr for Version {
    type Err = BadVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadVersion(s.to_string());
        if s.is_empty() {
            return Err(bad());
        }
        let parts = s
            .split('.')
            .map(|p| {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                p.parse::<u64>().map_err(|_| bad())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Version {
            parts,
            text: s.to_string(),
        })
    }
}

impl Version {
    fn significant(&self) -> &[u64] {
        let end = self
            .parts
            .iter()
            .rposition(|p| *p != 0)
            .map_or(0, |i| i + 1);
        &self.parts[..end]
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.significant().cmp(other.significant())
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A container image reference split into repository, tag and digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Everything before the tag: registry, namespace and name (`molo17/gluesync-core-hub`).
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl ImageRef {
    pub fn parse(image: &str) -> ImageRef {
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, Some(d.to_string())),
            None => (image, None),
        };
        // A ':' after the last '/' starts the tag; one before it belongs to a registry port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (
                rest[..last_slash + i].to_string(),
                Some(rest[last_slash + i + 1..].to_string()),
            ),
            None => (rest.to_string(), None),
        };
        ImageRef {
            repository,
            tag,
            digest,
        }
    }

    /// The last path segment of the repository: the name the version catalog knows the image by.
    pub fn name(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// The version the tag carries: the tag cut at the first `-` (`2.3.2.2-ubi` is `2.3.2.2`).
    pub fn version_text(&self) -> Option<&str> {
        let tag = self.tag.as_deref()?;
        Some(tag.split('-').next().unwrap_or(tag))
    }

    /// The tag's suffix after the version, with its `-` (`-ubi` for `2.3.2.2-ubi`), or "".
    pub fn tag_suffix(&self) -> &str {
        match self.tag.as_deref() {
            Some(tag) => tag.find('-').map_or("", |i| &tag[i..]),
            None => "",
        }
    }

    /// The same image at another version, keeping the tag's suffix; `registry` (the
    /// `spec.imageRegistry`) replaces the registry and namespace when given.
    pub fn with_version(&self, version: &str, registry: Option<&str>) -> String {
        let repository = match registry {
            Some(r) => format!("{}/{}", r.trim_end_matches('/'), self.name()),
            None => self.repository.clone(),
        };
        format!("{repository}:{version}{}", self.tag_suffix())
    }
}

/// The version an image runs, if its tag carries one that parses.
pub fn image_version(image: &str) -> Result<Version, BadVersion> {
    let parsed = ImageRef::parse(image);
    match parsed.version_text() {
        Some(v) => v.parse(),
        None => Err(BadVersion(String::new())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn compares_parts_as_numbers() {
        assert!(v("2.10.0") > v("2.9.9"));
        assert!(v("2.3.2.2") > v("2.3.2.1"));
        assert!(v("10") > v("9.99"));
        assert_eq!(v("2.3"), v("2.3.0"));
        assert_eq!(v("2.3.0").cmp(&v("2.3")), Ordering::Equal);
        assert!(v("2.3.0.1") > v("2.3"));
    }

    #[test]
    fn refuses_what_is_not_dotted_numbers() {
        for bad in [
            "", "latest", "2.3.x", "2..3", ".2", "2.", "v2.3", "2.3-ubi", "-1", " 2",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} parsed");
        }
        assert!("99999999999999999999999".parse::<Version>().is_err());
    }

    #[test]
    fn images_split_into_repository_and_tag() {
        let i = ImageRef::parse("molo17/gluesync-core-hub:2.3.2.2-ubi");
        assert_eq!(i.repository, "molo17/gluesync-core-hub");
        assert_eq!(i.tag.as_deref(), Some("2.3.2.2-ubi"));
        assert_eq!(i.name(), "gluesync-core-hub");
        assert_eq!(i.version_text(), Some("2.3.2.2"));
        assert_eq!(i.tag_suffix(), "-ubi");

        let i = ImageRef::parse("registry.local:5000/a/b/grafana:11.2.0@sha256:abc");
        assert_eq!(i.repository, "registry.local:5000/a/b/grafana");
        assert_eq!(i.tag.as_deref(), Some("11.2.0"));
        assert_eq!(i.digest.as_deref(), Some("sha256:abc"));
        assert_eq!(i.name(), "grafana");

        let i = ImageRef::parse("registry.local:5000/prometheus");
        assert_eq!(i.tag, None);
        assert_eq!(i.version_text(), None);
    }

    #[test]
    fn new_images_keep_the_suffix_and_take_the_registry() {
        let i = ImageRef::parse("molo17/gluesync-core-hub:2.3.2.1-ubi");
        assert_eq!(
            i.with_version("2.3.2.2", None),
            "molo17/gluesync-core-hub:2.3.2.2-ubi"
        );
        assert_eq!(
            i.with_version("2.3.2.2", Some("registry.example.com/mirror")),
            "registry.example.com/mirror/gluesync-core-hub:2.3.2.2-ubi"
        );
    }

    #[test]
    fn image_versions() {
        assert_eq!(
            image_version("molo17/x:2.3.2.2-crash").unwrap(),
            v("2.3.2.2")
        );
        assert!(image_version("molo17/x:latest").is_err());
        assert!(image_version("molo17/x").is_err());
    }
}
