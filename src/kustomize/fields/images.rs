//! `images` of a kustomization.
//!
//! Each entry is applied in order (a later entry sees what an earlier one wrote), as kustomize
//! v5.5 does: first to the `image` of every element of every `containers` and `initContainers`
//! list anywhere in the object (any kind, custom resources included, `ephemeralContainers` not),
//! then along [`IMAGES`] (which also turns a `null` `containers` list there into `[]`, as
//! kustomize does). `CustomResourceDefinition`s are left alone.
//!
//! An image matches an entry when it is the entry's `name`, optionally followed by `:tag` and
//! then `@sha256:digest` (kustomize's rule, with the name taken literally: kustomize reads it
//! as a regular expression, where `.` matches any character).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::fieldspec::{Create, IMAGES, shape, walk};
use super::{known_keys, list, optional_string};
use crate::kustomize::comparisons::Counted;
use crate::problem::{Problem, Problems, join_path};

/// The longest image name, new name, tag or digest accepted.
pub(crate) const MAX_IMAGE_LENGTH: usize = 1024;

/// `images` of one kustomization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Images {
    entries: Vec<Image>,
    /// The positions of the entries (ascending) by `name`.
    by_name: HashMap<Counted<String>, Vec<usize>>,
}

/// One `images` entry.
#[derive(Clone, Debug, PartialEq)]
struct Image {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
    digest: Option<String>,
}

impl Images {
    /// Reads `images` from a kustomization: `name` (required), `newName`, `newTag`, `digest`.
    /// `tagSuffix` is refused: kustomize v5.5 appends it twice to a pod template's image.
    pub fn read(kustomization: &Value) -> Result<Images, Vec<Problem>> {
        let mut problems = Problems::default();
        let mut entries = Vec::new();
        for (i, entry) in list(kustomization, "images", &mut problems).iter().enumerate() {
            let field = format!("images[{i}]");
            let Some(entry) = entry.as_object() else {
                problems.push(&field, format!("expected a map with `name`, found {}", shape(entry)));
                continue;
            };
            known_keys(entry, &["name", "newName", "newTag", "digest", "tagSuffix"], &field, &mut problems);
            if entry.contains_key("tagSuffix") {
                problems.push(
                    format!("{field}.tagSuffix"),
                    "not supported: kustomize v5.5 appends the suffix twice to a pod template's image; write the \
                     whole tag in `newTag`",
                );
            }
            let check = |key: &str, rule: fn(&str) -> Result<(), String>, problems: &mut Problems| {
                let value = optional_string(entry, key, &field, problems)?;
                match rule(value) {
                    Ok(()) => Some(value.to_owned()),
                    Err(message) => {
                        problems.push(format!("{field}.{key}"), message);
                        None
                    }
                }
            };
            let name = check("name", image_name, &mut problems);
            let new_name = check("newName", new_name, &mut problems);
            let new_tag = check("newTag", new_tag, &mut problems);
            let digest = check("digest", digest, &mut problems);
            if !entry.contains_key("name") {
                problems.push(format!("{field}.name"), "required: the image name to match, without tag or digest");
            }
            if let Some(name) = name {
                entries.push(Image { name, new_name, new_tag, digest });
            }
        }
        problems.finish(Images::new(entries))
    }

    fn new(entries: Vec<Image>) -> Images {
        let mut by_name: HashMap<Counted<String>, Vec<usize>> = HashMap::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            by_name.entry(Counted(entry.name.clone())).or_default().push(i);
        }
        Images { entries, by_name }
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Applies them to one object. An `image` that is not a string, or a `containers` element
    /// that is not a map, is a problem at that field of the object.
    pub fn apply(&self, object: &mut Value) -> Result<(), Problem> {
        if self.entries.is_empty() || object.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
            return Ok(());
        }
        // kustomize runs entry by entry, each over both walks; since one entry applied twice to
        // an image gives what it gives once, that is every entry in order, once per image field
        // either walk reaches: one pass over the object, not one per entry.
        let mut seen = HashSet::new();
        let mut at = String::new();
        containers_anywhere(object, &mut at, &mut |image, at| {
            seen.insert(at.to_owned());
            self.set(image, at)
        })?;
        for spec in IMAGES {
            walk(object, spec, Create::Nothing, &mut |image, at| {
                if seen.insert(at.to_owned()) { self.set(image, at) } else { Ok(()) }
            })?;
        }
        Ok(())
    }

    /// Rewrites `image` (at `at` in the object) by every entry in order: by the entries it
    /// matches, found through their names, not by a comparison with each.
    fn set(&self, image: &mut Value, at: &str) -> Result<(), Problem> {
        match image {
            Value::Null => Ok(()),
            Value::String(current) => {
                let mut from = 0;
                while let Some(i) = self.next_match(current, from) {
                    if let Some(new) = self.entries[i].rewrite(current) {
                        *current = new;
                    }
                    from = i + 1;
                }
                Ok(())
            }
            other => Err(Problem::field(
                at,
                format!("images cannot read this image: expected a string, found {}", shape(other)),
            )),
        }
    }
}

impl Images {
    /// The first entry from position `from` on whose name `image` may match ([`matches`]): every
    /// other entry there leaves it as it is.
    fn next_match(&self, image: &str, from: usize) -> Option<usize> {
        names_it_may_match(image)
            .into_iter()
            .flatten()
            .filter_map(|name| self.by_name.get(&Counted(name.to_owned())))
            .filter_map(|positions| positions.get(positions.partition_point(|&i| i < from)).copied())
            .min()
    }
}

/// Every name an image matches by [`matches`]: it is the image with nothing, `:tag`, `@sha256:digest`
/// or both taken off its end, and tags and digests hold neither `:` nor `@`, so each of those is
/// cut at the last `:` or `@` (some of these may not match: [`Image::rewrite`] decides).
fn names_it_may_match(image: &str) -> [Option<&str>; 4] {
    let at = image.rfind('@');
    let colon = image.rfind(':');
    let colon_before_at = at.and_then(|at| image[..at].rfind(':'));
    [Some(image), at.map(|at| &image[..at]), colon.map(|c| &image[..c]), colon_before_at.map(|c| &image[..c])]
}

impl Image {
    /// The image after this entry, or `None` when it does not match.
    fn rewrite(&self, image: &str) -> Option<String> {
        if !matches(image, &self.name) {
            return None;
        }
        let (name, mut tag, mut digest) = split(image);
        let name = self.new_name.as_deref().unwrap_or(name);
        // A new tag or digest replaces both the old tag and the old digest.
        match (&self.new_tag, &self.digest) {
            (None, None) => {}
            (new_tag, new_digest) => {
                tag = new_tag.as_deref().unwrap_or_default();
                digest = new_digest.as_deref().unwrap_or_default();
            }
        }
        let mut out = name.to_owned();
        if !tag.is_empty() {
            out.push(':');
            out.push_str(tag);
        }
        if !digest.is_empty() {
            out.push('@');
            out.push_str(digest);
        }
        Some(out)
    }
}

/// Calls `set` on the `image` of every element of every `containers` or `initContainers` list
/// in `node`, depth first (kustomize's legacy image walk).
fn containers_anywhere(
    node: &mut Value,
    at: &mut String,
    set: &mut dyn FnMut(&mut Value, &str) -> Result<(), Problem>,
) -> Result<(), Problem> {
    let len = at.len();
    match node {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                *at = join_path(at, key);
                containers_anywhere(value, at, set)?;
                if let ("containers" | "initContainers", Value::Array(items)) = (key.as_str(), &mut *value) {
                    let list_len = at.len();
                    for (i, item) in items.iter_mut().enumerate() {
                        at.push_str(&format!("[{i}]"));
                        match item {
                            Value::Object(container) => {
                                if let Some(image) = container.get_mut("image") {
                                    let image_at = join_path(at, "image");
                                    set(image, &image_at)?;
                                }
                            }
                            other => {
                                return Err(Problem::field(
                                    at.as_str(),
                                    format!("expected a container (a map), found {}", shape(other)),
                                ));
                            }
                        }
                        at.truncate(list_len);
                    }
                }
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                at.push_str(&format!("[{i}]"));
                containers_anywhere(item, at, set)?;
                at.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether `image` is `name`, then optionally `:tag`, then optionally `@sha256:digest`, tags and
/// digests of the characters kustomize allows (`[a-zA-Z0-9_.{}-]`).
fn matches(image: &str, name: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '{' | '}' | '-');
    let Some(mut rest) = image.strip_prefix(name) else {
        return false;
    };
    if let Some(tag) = rest.strip_prefix(':') {
        rest = tag.trim_start_matches(allowed);
    }
    if let Some(digest) = rest.strip_prefix("@sha256:") {
        rest = digest.trim_start_matches(allowed);
    }
    rest.is_empty()
}

/// An image's name, tag and digest (empty when absent), as kustomize splits them: a `:` before
/// the first `/` belongs to a registry's port.
fn split(image: &str) -> (&str, &str, &str) {
    let start = match image.find('/') {
        Some(slash) if slash > 0 => slash,
        _ => 0,
    };
    let search = &image[start..];
    let at = search.find('@').map(|i| i + start);
    let colon = search.find(':').map(|i| i + start);
    match (colon, at) {
        (None, None) => (image, "", ""),
        (colon, Some(at)) if colon.is_none_or(|c| at < c) => (&image[..at], "", &image[at + 1..]),
        (Some(colon), Some(at)) => (&image[..colon], &image[colon + 1..at], &image[at + 1..]),
        (Some(colon), None) => (&image[..colon], &image[colon + 1..], ""),
        (None, Some(_)) => unreachable!("handled by the digest-only arm"),
    }
}

fn bounded(value: &str) -> Result<(), String> {
    if value.len() > MAX_IMAGE_LENGTH {
        return Err(format!("{} bytes; at most {MAX_IMAGE_LENGTH} are accepted", value.len()));
    }
    Ok(())
}

/// `name`: an image name (a tag or digest is allowed and then must match too), of the characters
/// of image references only: kustomize builds a regular expression from it.
fn image_name(value: &str) -> Result<(), String> {
    bounded(value)?;
    if value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@')) {
        Ok(())
    } else {
        Err("not an image name; accepted: letters, digits, `.`, `_`, `-`, `/`, `:` and `@`, such as \
             `registry.example.com:5000/team/app`"
            .into())
    }
}

/// `newName`: an image name without tag or digest (a `:` before the first `/` is a registry
/// port).
fn new_name(value: &str) -> Result<(), String> {
    image_name(value)?;
    let after_registry = value.rfind('/').map_or(value, |slash| &value[slash..]);
    if value.contains('@') || after_registry.contains(':') {
        return Err("holds a tag or digest; put the tag in `newTag` and the digest in `digest`".into());
    }
    Ok(())
}

/// `newTag`: a tag (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`), optionally followed by `@` and a
/// digest, which kustomize then writes after the tag.
fn new_tag(value: &str) -> Result<(), String> {
    bounded(value)?;
    let (tag, tag_digest) = match value.split_once('@') {
        Some((tag, tag_digest)) => (tag, Some(tag_digest)),
        None => (value, None),
    };
    let bytes = tag.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !valid {
        return Err("not an image tag; accepted: 1 to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or \
                    `-` (quote a numeric tag such as \"1.10\")"
            .into());
    }
    tag_digest.map_or(Ok(()), digest)
}

/// `digest`: `algorithm:encoded`, such as `sha256:` and 64 hexadecimal digits.
fn digest(value: &str) -> Result<(), String> {
    bounded(value)?;
    let accepted = "accepted: `algorithm:encoded` such as `sha256:` followed by 64 lowercase hexadecimal digits";
    let Some((algorithm, encoded)) = value.split_once(':') else {
        return Err(format!("not a digest; {accepted}"));
    };
    let algorithm_ok = algorithm
        .split(['+', '.', '_', '-'])
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    let encoded_ok =
        !encoded.is_empty() && encoded.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b'_' | b'-'));
    let sha256_ok = algorithm != "sha256"
        || (encoded.len() == 64 && encoded.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    if algorithm_ok && encoded_ok && sha256_ok { Ok(()) } else { Err(format!("not a digest; {accepted}")) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{Just, ProptestConfig, Strategy, prop_oneof};
    use serde_json::json;

    use super::*;
    use crate::kustomize::comparisons::counted;

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn images(entries: Value) -> Images {
        Images::read(&json!({ "images": entries })).expect("valid images")
    }

    fn refused(entries: Value) -> Vec<String> {
        Images::read(&json!({ "images": entries })).expect_err("refused").iter().map(ToString::to_string).collect()
    }

    fn rewrite(entry: Value, image: &str) -> String {
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "image": image}]}});
        images(json!([entry])).apply(&mut pod).unwrap();
        pod["spec"]["containers"][0]["image"].as_str().unwrap().to_owned()
    }

    #[test]
    fn split_follows_kustomize_with_registry_ports() {
        assert_eq!(split("nginx"), ("nginx", "", ""));
        assert_eq!(split("nginx:1.0"), ("nginx", "1.0", ""));
        assert_eq!(split("nginx@sha256:ab"), ("nginx", "", "sha256:ab"));
        assert_eq!(split("nginx:1.0@sha256:ab"), ("nginx", "1.0", "sha256:ab"));
        assert_eq!(split("localhost:5000/app"), ("localhost:5000/app", "", ""));
        assert_eq!(split("localhost:5000/app:2"), ("localhost:5000/app", "2", ""));
        assert_eq!(split("localhost:5000/app@sha256:ab"), ("localhost:5000/app", "", "sha256:ab"));
        assert_eq!(split("r.io/a/b:1@sha256:ab"), ("r.io/a/b", "1", "sha256:ab"));
    }

    #[test]
    fn matching_is_by_name_then_optional_tag_and_sha256_digest() {
        assert!(matches("nginx", "nginx"));
        assert!(matches("nginx:1.0", "nginx"));
        assert!(matches("nginx:{{tag}}", "nginx"));
        assert!(matches("nginx@sha256:ab", "nginx"));
        assert!(matches("nginx:1@sha256:ab", "nginx"));
        assert!(!matches("nginx-x", "nginx"));
        assert!(!matches("docker.io/nginx", "nginx"));
        assert!(!matches("nginx@sha512:ab", "nginx"), "kustomize only knows sha256 digests here");
        assert!(!matches("nginxXio", "nginx.io"), "the name is literal, not a regular expression");
        assert!(matches("localhost:5000/app:1", "localhost:5000/app"));
    }

    #[test]
    fn new_name_keeps_the_tag_and_digest() {
        assert_eq!(rewrite(json!({"name": "nginx", "newName": "r.io:5000/nginx"}), "nginx:1.0"), "r.io:5000/nginx:1.0");
        assert_eq!(
            rewrite(json!({"name": "nginx", "newName": "mirror/nginx"}), "nginx@sha256:ab"),
            "mirror/nginx@sha256:ab"
        );
    }

    #[test]
    fn new_tag_replaces_tag_and_digest() {
        assert_eq!(rewrite(json!({"name": "nginx", "newTag": "2"}), "nginx:1@sha256:ab"), "nginx:2");
        assert_eq!(rewrite(json!({"name": "nginx", "newTag": "2"}), "nginx"), "nginx:2");
    }

    #[test]
    fn digest_replaces_tag_and_digest_and_goes_with_a_new_tag() {
        assert_eq!(rewrite(json!({"name": "nginx", "digest": SHA}), "nginx:1"), format!("nginx@{SHA}"));
        assert_eq!(
            rewrite(json!({"name": "nginx", "newTag": "2", "digest": SHA}), "nginx:1"),
            format!("nginx:2@{SHA}")
        );
        assert_eq!(
            rewrite(json!({"name": "nginx", "newTag": format!("2@{SHA}")}), "nginx:1"),
            format!("nginx:2@{SHA}")
        );
    }

    #[test]
    fn a_name_alone_changes_nothing_and_other_images_are_untouched() {
        assert_eq!(rewrite(json!({"name": "nginx"}), "nginx:1"), "nginx:1");
        assert_eq!(rewrite(json!({"name": "nginx", "newTag": "2"}), "redis:1"), "redis:1");
    }

    #[test]
    fn later_entries_see_what_earlier_ones_wrote() {
        let mut pod = json!({"kind": "Pod", "spec": {"containers": [{"image": "busybox"}]}});
        images(json!([{"name": "busybox", "newName": "nginx"}, {"name": "nginx", "newTag": "3"}]))
            .apply(&mut pod)
            .unwrap();
        assert_eq!(pod["spec"]["containers"][0]["image"], "nginx:3");
    }

    #[test]
    fn each_image_is_rewritten_once_by_the_chain_of_entries() {
        // b→c then a→b: `a` ends as `b`, not `c` (a second pass of the whole chain would give c).
        let mut pod = json!({"kind": "Pod", "spec": {"containers": [{"image": "a:1"}]}});
        images(json!([{"name": "b", "newName": "c"}, {"name": "a", "newName": "b"}])).apply(&mut pod).unwrap();
        assert_eq!(pod["spec"]["containers"][0]["image"], "b:1");
    }

    #[test]
    fn containers_and_init_containers_anywhere_but_not_ephemeral_ones_nor_crds() {
        let entry = images(json!([{"name": "nginx", "newTag": "2"}]));
        let mut custom = json!({"apiVersion": "example.com/v1", "kind": "Thing", "spec": {"deep": {
            "containers": [{"image": "nginx"}],
            "initContainers": [{"image": "nginx:1"}],
            "ephemeralContainers": [{"image": "nginx"}],
        }}});
        entry.apply(&mut custom).unwrap();
        assert_eq!(custom["spec"]["deep"]["containers"][0]["image"], "nginx:2");
        assert_eq!(custom["spec"]["deep"]["initContainers"][0]["image"], "nginx:2");
        assert_eq!(custom["spec"]["deep"]["ephemeralContainers"][0]["image"], "nginx");
        let mut crd = json!({"kind": "CustomResourceDefinition", "spec": {"containers": [{"image": "nginx"}]}});
        let before = crd.clone();
        entry.apply(&mut crd).unwrap();
        assert_eq!(crd, before);
    }

    #[test]
    fn a_null_container_list_in_a_pod_template_becomes_empty_as_in_kustomize() {
        let mut deployment = json!({"kind": "Deployment", "spec": {"template": {"spec": {"initContainers": null, "containers": [{"image": null}]}}}});
        images(json!([{"name": "nginx", "newTag": "2"}])).apply(&mut deployment).unwrap();
        assert_eq!(
            deployment["spec"]["template"]["spec"],
            json!({"initContainers": [], "containers": [{"image": null}]})
        );
    }

    #[test]
    fn a_bad_image_or_container_is_a_problem_at_that_field() {
        let entry = images(json!([{"name": "nginx", "newTag": "2"}]));
        let mut map_image = json!({"kind": "Pod", "spec": {"containers": [{"image": {"a": "b"}}]}});
        let problem = entry.apply(&mut map_image).unwrap_err();
        assert_eq!(problem.field, "spec.containers[0].image");
        let mut scalar = json!({"kind": "Pod", "spec": {"containers": ["nginx"]}});
        assert_eq!(entry.apply(&mut scalar).unwrap_err().field, "spec.containers[0]");
    }

    #[test]
    fn entries_are_refused_by_field_with_what_is_accepted() {
        let found = refused(json!([
            {"newTag": "2"},
            {"name": "nginx", "tagSuffix": "-x"},
            {"name": "nginx", "newTag": 1.10},
            {"name": "nginx", "newTag": "-bad"},
            {"name": "nginx", "digest": "sha256:abc"},
            {"name": "nginx", "newName": "nginx:2"},
            {"name": "ng(inx|.*)"},
            "nginx",
            {"name": "nginx", "newtag": "2"},
        ]));
        let expected = [
            "images[0].name: required",
            "images[1].tagSuffix: not supported",
            "images[2].newTag: expected a string, found a number; quote it",
            "images[3].newTag: not an image tag",
            "images[4].digest: not a digest",
            "images[5].newName: holds a tag or digest",
            "images[6].name: not an image name",
            "images[7]: expected a map",
            "images[8].newtag: unknown field",
        ];
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        for (found, expected) in found.iter().zip(expected) {
            assert!(found.starts_with(expected), "{found} should start with {expected}");
        }
    }

    #[test]
    fn an_attacker_cannot_send_unbounded_images() {
        let found = refused(json!([{"name": "x".repeat(MAX_IMAGE_LENGTH + 1)}]));
        assert_eq!(found, ["images[0].name: 1025 bytes; at most 1024 are accepted"]);
        let many: Vec<Value> = (0..=super::super::MAX_ENTRIES).map(|_| json!({"name": "a"})).collect();
        assert!(refused(Value::Array(many))[0].starts_with("images: 1001 entries"));
    }

    // === the entries found by name against every entry compared ===

    /// Image names, with tags, digests, registry ports and the characters around them.
    const NAMES: [&str; 8] =
        ["nginx", "nginx:1", "reg:5000/nginx", "nginx@sha256", "x@sha256:ab", "", "a.b", "reg:5000"];

    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            (0..NAMES.len()).prop_map(|i| NAMES[i].to_owned()),
            Just(":1".to_owned()),
            Just(":{x}-y.z".to_owned()),
            Just("@sha256:ab".to_owned()),
            Just("@sha256:".to_owned()),
            Just(":".to_owned()),
            Just("/".to_owned()),
        ]
    }

    fn entry() -> impl Strategy<Value = Image> {
        let new_name = proptest::option::of(prop_oneof![Just("nginx"), Just("other"), Just("reg:5000/nginx")]);
        let new_tag = proptest::option::of(prop_oneof![Just("1"), Just("2"), Just("")]);
        let digest = proptest::option::of(Just("sha256:ab"));
        ((0..NAMES.len()), new_name, new_tag, digest).prop_map(|(name, new_name, new_tag, digest)| Image {
            name: NAMES[name].to_owned(),
            new_name: new_name.map(str::to_owned),
            new_tag: new_tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        })
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn the_entries_found_by_name_rewrite_what_every_entry_compared_did(
            entries in proptest::collection::vec(entry(), 0..8),
            pieces in proptest::collection::vec(piece(), 1..4),
        ) {
            let images = Images::new(entries);
            let image = pieces.concat();
            let mut before = image.clone();
            for entry in &images.entries {
                if let Some(new) = entry.rewrite(&before) {
                    before = new;
                }
            }
            let mut indexed = Value::String(image);
            images.set(&mut indexed, "image").unwrap();
            proptest::prop_assert_eq!(indexed, Value::String(before));
        }
    }

    #[test]
    fn attacker_a_thousand_entries_over_twenty_thousand_containers_take_linear_work() {
        let (count, entries) = (20_000, crate::kustomize::fields::MAX_ENTRIES);
        let images =
            images(Value::Array((0..entries).map(|i| json!({"name": format!("app-{i}"), "newTag": "2"})).collect()));
        let containers: Vec<Value> = (0..count)
            .map(|i| json!({"name": format!("c{i}"), "image": format!("app-{}:1", i % (2 * entries))}))
            .collect();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": containers}});
        let (applied, work) = counted(|| images.apply(&mut pod));
        applied.unwrap();
        assert_eq!(pod["spec"]["containers"][entries - 1]["image"], format!("app-{}:2", entries - 1));
        assert_eq!(pod["spec"]["containers"][entries]["image"], format!("app-{entries}:1"));
        // A few lookups per image; comparing it with every entry made 1,000.
        assert!(work <= 6 * count, "{work} comparisons for {count} images");
    }
}
