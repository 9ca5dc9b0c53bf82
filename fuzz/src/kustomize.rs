//! `kustomize_build`: arbitrary trees of kustomizations (patches of every kind, generators,
//! components, bases in subdirectories, resources) → `manifests::load` under a revision budget
//! with small limits, on a thread with the deployment's 2 MiB stack.
//!
//! Two encodings of a tree, told apart by the first bytes:
//!
//! * `@@ <path>` starts a text tree: each line `@@ <path>` starts a file, the lines up to the
//!   next such line are its text, and `{{N*text*}}` in a file stands for `text` repeated `N`
//!   times (at most [`MAX_REPEAT`], `{i}` in it replaced by the repetition's index; they nest). The seeds that
//!   carry the known attacks are written this way, readable and small.
//! * anything else is decoded with `arbitrary` into a [`Tree`]: directories, each with an optional
//!   kustomization made of arbitrary choices of its fields (resources, bases, components, patches
//!   in strategic merge, JSON 6902 as JSON or YAML, inline or from files, targeted; generators
//!   with literals, files and env files; labels, annotations, images, replicas, prefixes, sort
//!   options) and files of objects, patches, env lines, small YAML snippets (deep chains,
//!   anchors and aliases, alias bombs) or raw bytes. Words come mostly from short lists, so names,
//!   files and directories line up and the build gets past parsing into the transformers.
//!
//! Invariants: no panic and no abort (a stack overflow aborts: the 2 MiB thread is the
//! deployment's); refused with located problems (every problem names a file, but the trailing
//! "and N more problems"), at most `limits.problems + 1` of them; accepted only within the
//! budget: at most `limits.objects` objects, none nested deeper than [`budget::MAX_DEPTH`], all in
//! the tenant namespace; and when the budget was overrun, exactly one problem, naming the limit.

use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use cdtarget::budget::{self, Budget};
use cdtarget::manifests::{self, Content, SourceFile};
use cdtarget::policy::Policy;
use cdtarget::problem::Problem;
use serde_json::Value;

/// The tenant namespace.
pub const NAMESPACE: &str = "team-a";
/// tokio's blocking threads and the stack the deployment's loader must fit in.
pub const STACK_BYTES: usize = 2 << 20;
/// Most copies one `{{N*...}}` or one repeated element of a [`Tree`] makes.
pub const MAX_REPEAT: usize = 12_000;
/// Most repetitions of one text tree's file expanded.
const MAX_NESTING: usize = 16;
/// Most bytes of all files of one input, once rendered (the loader reads 4 MiB a file).
const MAX_TREE_BYTES: usize = 6 << 20;
/// Most files of one input.
const MAX_FILES: usize = 64;

/// The small budget every input is loaded under, so the fuzzer stays fast.
pub fn limits() -> budget::Limits {
    budget::Limits {
        bytes: 8 << 20,
        objects: 500,
        work: 5_000_000,
        deadline: Duration::from_secs(10),
        ..budget::Limits::default()
    }
}

/// The fuzz target.
pub fn check(data: &[u8]) {
    let Some(files) = files(data) else { return };
    on_small_stack(move || check_files(files));
}

/// Runs `f` on a thread with [`STACK_BYTES`] of stack; a panic there is resumed here (so the
/// fuzzer and the replay see it).
pub fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    let thread = std::thread::Builder::new().name("loader".to_owned()).stack_size(STACK_BYTES).spawn(f);
    if let Err(panic) = thread.expect("a loader thread").join() {
        std::panic::resume_unwind(panic);
    }
}

/// The files an input stands for; `None` when it is too large once rendered.
pub fn files(data: &[u8]) -> Option<Vec<SourceFile>> {
    let files = if data.starts_with(b"@@ ") {
        text_tree(&super::text(data))
    } else {
        Tree::arbitrary_take_rest(Unstructured::new(data)).ok()?.render()
    };
    (files.iter().map(|f| f.text.len()).sum::<usize>() <= MAX_TREE_BYTES).then_some(files)
}

/// Loads `files` under the small budget on this thread and checks the invariants.
pub fn check_files(files: Vec<SourceFile>) {
    let limits = limits();
    let names: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    let budget = Rc::new(Budget::new(limits));
    let loaded = {
        let _entered = budget.enter();
        manifests::load(files, NAMESPACE, &Policy::default())
    };
    let overrun = budget.overrun();
    if std::env::var_os("CDTARGET_FUZZ_SHOW").is_some() {
        // Shows what an input does when reproducing it.
        let shown: Vec<String> = match &loaded {
            Ok(set) => set.documents.iter().map(|d| d.location()).collect(),
            Err(problems) => problems.iter().map(|p| format!("{p}")).collect(),
        };
        eprintln!(
            "files: {names:?}\noverrun: {overrun:?}\n{} {shown:#?}",
            if loaded.is_ok() { "accepted" } else { "refused" }
        );
    }
    match loaded {
        Ok(set) => {
            assert!(overrun.is_none(), "accepted although the budget was overrun: {overrun:?}");
            assert!(
                set.documents.len() <= limits.objects,
                "accepted {} objects, more than the limit of {}",
                set.documents.len(),
                limits.objects
            );
            for document in &set.documents {
                let value = match &document.content {
                    Content::Object(value) => value.clone(),
                    Content::CDTarget(target) => serde_json::to_value(target.as_ref()).expect("a CDTarget serialises"),
                };
                let depth = budget::measure(&value, usize::MAX).depth;
                assert!(depth <= budget::MAX_DEPTH, "accepted an object {depth} levels deep: {}", document.location());
                let namespace = value.pointer("/metadata/namespace").and_then(Value::as_str);
                assert_eq!(namespace, Some(NAMESPACE), "accepted an object outside the tenant namespace: {value}");
            }
        }
        Err(problems) => check_refusal(&problems, &names, &limits, overrun.as_ref()),
    }
}

fn check_refusal(problems: &[Problem], names: &[String], limits: &budget::Limits, overrun: Option<&budget::Overrun>) {
    assert!(!problems.is_empty(), "a refusal without a problem");
    assert!(
        problems.len() <= limits.problems + 1,
        "{} problems, more than the {} kept and the one counting the rest",
        problems.len(),
        limits.problems
    );
    for (i, problem) in problems.iter().enumerate() {
        assert!(!problem.message.is_empty(), "problem says nothing: {problem:?}");
        let trailing = i + 1 == problems.len() && problem.file.is_none() && problem.message.starts_with("and ");
        if trailing {
            assert!(problem.message.contains("more problems"), "an unlocated problem: {problem:?}");
            continue;
        }
        let file = problem.file.as_deref().unwrap_or_else(|| panic!("problem names no file: {problem:?}"));
        // A file of an empty path is an input's own (a text tree's `@@ ` line), not a lost location.
        assert!(!file.is_empty() || names.iter().any(String::is_empty), "problem names an empty file: {problem:?}");
    }
    if let Some(overrun) = overrun {
        let limit = overrun.to_string();
        assert_eq!(problems.len(), 1, "an overrun ({limit}) is one problem, got {problems:#?}");
        assert!(
            problems[0].message.contains(&limit),
            "the problem of an overrun names it ({limit}): {:?}",
            problems[0]
        );
    }
}

// ---- The text encoding ----

/// Files of a text tree (`@@ path` lines, `{{N*text*}}` repetitions).
pub fn text_tree(text: &str) -> Vec<SourceFile> {
    let mut files: Vec<SourceFile> = Vec::new();
    for line in text.split_inclusive('\n') {
        if let Some(path) = line.strip_prefix("@@ ") {
            if files.len() == MAX_FILES {
                break;
            }
            files.push(SourceFile { path: path.trim_end_matches(['\n', '\r']).to_owned(), text: String::new() });
        } else if let Some(file) = files.last_mut() {
            file.text.push_str(line);
        }
    }
    for file in &mut files {
        file.text = expand(&file.text);
    }
    files
}

/// `{{N*text*}}` → `text` N times, `{i}` in it the index; innermost first, so repetitions nest
/// (at most [`MAX_NESTING`] of them are expanded).
fn expand(text: &str) -> String {
    let mut text = text.to_owned();
    for _ in 0..MAX_NESTING {
        let Some(end) = text.find("*}}") else { break };
        // The innermost repetition: the last `{{N*` before the first end.
        let found = text[..end].rmatch_indices("{{").find_map(|(start, _)| {
            let (count, body) = text[start + 2..end].split_once('*')?;
            Some((start, count.parse::<usize>().ok()?.min(MAX_REPEAT), body))
        });
        let Some((start, count, body)) = found else { break };
        let mut repeated = String::new();
        for i in 0..count {
            if repeated.len() > MAX_TREE_BYTES {
                break;
            }
            repeated.push_str(&body.replace("{i}", &i.to_string()));
        }
        text.replace_range(start..end + 3, &repeated);
    }
    text
}

// ---- The structured encoding ----

/// Directories a tree's parts live in.
const DIRS: [&str; 8] = ["", "base", "base/common", "overlays/prod", "overlays/dev", "components/extra", "comp", "app"];
/// Names of the files beside a kustomization.
const FILES: [&str; 12] = [
    "deploy.yaml",
    "cm.yaml",
    "svc.yaml",
    "patch.yaml",
    "patch.json",
    "ops.yaml",
    "app.env",
    "data.txt",
    "more.yml",
    "kustomization.yaml",
    "sub/x.yaml",
    "../cm.yaml",
];
const KUSTOMIZATION_NAMES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];
/// apiVersion and kind of the objects.
const KINDS: [(&str, &str); 16] = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "CronJob"),
    ("networking.k8s.io/v1", "Ingress"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "PersistentVolumeClaim"),
    ("cdtarget.io/v1alpha1", "CDTarget"),
    ("v1", "Namespace"),
    ("example.com/v1", "Widget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "List"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
];
/// Words: names, keys, values, selectors, directives.
const WORDS: [&str; 72] = [
    "app",
    "web",
    "cm",
    "config",
    "secret",
    "svc",
    "team-a",
    "team-b",
    "default",
    "",
    "name",
    "namespace",
    "labels",
    "annotations",
    "metadata",
    "spec",
    "data",
    "stringData",
    "template",
    "containers",
    "image",
    "nginx",
    "nginx:1.25",
    "busybox",
    "env",
    "envFrom",
    "configMapRef",
    "secretRef",
    "volumes",
    "configMap",
    "replicas",
    "selector",
    "matchLabels",
    "ports",
    "port",
    "value",
    "key",
    "$patch",
    "delete",
    "replace",
    "merge",
    "$retainKeys",
    "$setElementOrder/containers",
    "$deleteFromPrimitiveList/args",
    "args",
    "cdtarget.io/cdtarget",
    "app.kubernetes.io/name",
    "config.kubernetes.io/local-config",
    "true",
    "false",
    "a",
    "b",
    "x",
    "ConfigMap",
    "Deployment",
    "Secret",
    "Service",
    "v1",
    "apps",
    "apps/v1",
    "..",
    "../..",
    "/etc/passwd",
    "https://github.com/x/y",
    ".*",
    "app=web",
    "!app",
    "web-.*",
    "tmp",
    "d",
    "k=v",
    "kustomize.config.k8s.io/behavior",
];

fn pick<T: Copy, const N: usize>(list: &[T; N], i: u8) -> T {
    list[usize::from(i) % N]
}

/// A whole input: directories with their kustomizations and files.
#[derive(Arbitrary, Debug)]
pub struct Tree {
    dirs: Vec<Dir>,
}

#[derive(Arbitrary, Debug)]
struct Dir {
    at: u8,
    kustomization: Option<Kustomization>,
    files: Vec<File>,
}

#[derive(Arbitrary, Debug)]
struct Kustomization {
    name: u8,
    component: bool,
    header: bool,
    block: bool,
    fields: Vec<Field>,
}

#[derive(Arbitrary, Debug)]
struct File {
    name: FileName,
    content: FileContent,
}

#[derive(Arbitrary, Debug)]
enum FileName {
    Listed(u8),
    Free(String),
}

#[derive(Arbitrary, Debug)]
enum FileContent {
    Objects(Vec<Object>),
    Many { count: u16, object: Object },
    JsonPatch { json: bool, ops: Vec<Op> },
    Env(Vec<(Word, Word)>),
    Snippet(Node),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Word {
    Listed(u8),
    /// A listed word followed by the index of the repetition it is in.
    Indexed(u8),
    Free(String),
}

#[derive(Arbitrary, Debug)]
struct Object {
    kind: u8,
    name: Word,
    namespace: Option<Word>,
    labels: Vec<(Word, Word)>,
    annotations: Vec<(Word, Word)>,
    body: Body,
}

#[derive(Arbitrary, Debug)]
enum Body {
    None,
    Data(Vec<(Word, Word)>),
    Workload { replicas: Option<i16>, selector: Vec<(Word, Word)>, containers: Vec<Container>, volumes: Vec<Word> },
    Spec(Node),
    Fields(Vec<(Word, Node)>),
}

#[derive(Arbitrary, Debug)]
struct Container {
    name: Word,
    image: Word,
    config_map: Option<Word>,
    secret: Option<Word>,
    args: Vec<Word>,
    directive: Option<Word>,
}

#[derive(Arbitrary, Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Word),
    Map(Vec<(Word, Node)>),
    List(Vec<Node>),
    /// `{key: {key: ... leaf}}`, `depth` levels.
    Chain {
        depth: u8,
        key: Word,
        leaf: Box<Node>,
    },
    Anchor(u8, Box<Node>),
    Alias(u8),
    /// Nested anchors, each a list of `width` aliases of the one before.
    Bomb {
        levels: u8,
        width: u8,
        text: u16,
    },
    Object(Box<Object>),
}

#[derive(Arbitrary, Debug)]
enum Field {
    Resources(Vec<Ref>),
    Bases(Vec<Ref>),
    Components(Vec<Ref>),
    RepeatedComponent { count: u16, to: Ref },
    Namespace(Word),
    NamePrefix(Word),
    NameSuffix(Word),
    CommonLabels(Vec<(Word, Word)>),
    Labels(Vec<LabelSet>),
    CommonAnnotations(Vec<(Word, Word)>),
    Images(Vec<Image>),
    Replicas(Vec<(Word, Node)>),
    Patches(Vec<Patch>),
    ManyPatches { count: u16, patch: Box<Patch> },
    PatchesStrategicMerge(Vec<PatchSource>),
    PatchesJson6902(Vec<(Target, PatchSource)>),
    ConfigMapGenerator(Vec<Generator>),
    SecretGenerator(Vec<Generator>),
    GeneratorOptions(GeneratorOptions),
    SortOptions { fifo: bool, first: Vec<Word>, last: Vec<Word> },
    Other(Word, Node),
}

#[derive(Arbitrary, Debug)]
enum Ref {
    File(u8),
    Dir(u8),
    Word(Word),
}

#[derive(Arbitrary, Debug)]
struct LabelSet {
    pairs: Vec<(Word, Word)>,
    selectors: Option<bool>,
    templates: Option<bool>,
}

#[derive(Arbitrary, Debug)]
struct Image {
    name: Word,
    new_name: Option<Word>,
    new_tag: Option<Word>,
    digest: Option<Word>,
}

#[derive(Arbitrary, Debug)]
struct Patch {
    source: PatchSource,
    target: Option<Target>,
    options: Option<(bool, bool)>,
}

#[derive(Arbitrary, Debug)]
enum PatchSource {
    Path(u8),
    Inline(PatchBody),
}

#[derive(Arbitrary, Debug)]
enum PatchBody {
    Strategic(Object),
    Json { json: bool, ops: Vec<Op> },
    Snippet(Node),
}

#[derive(Arbitrary, Debug)]
struct Target {
    group: Option<Word>,
    version: Option<Word>,
    kind: Option<Word>,
    name: Option<Word>,
    namespace: Option<Word>,
    label_selector: Option<Word>,
    annotation_selector: Option<Word>,
}

#[derive(Arbitrary, Debug)]
struct Op {
    op: u8,
    path: Vec<Segment>,
    from: Option<Vec<Segment>>,
    value: Option<Node>,
    /// Times the operation is written (`Indexed` words counting).
    repeat: u8,
}

#[derive(Arbitrary, Debug)]
enum Segment {
    Word(Word),
    Index(u8),
    Append,
}

#[derive(Arbitrary, Debug)]
struct Generator {
    name: Word,
    namespace: Option<Word>,
    behavior: Option<u8>,
    literals: Vec<(Word, Word)>,
    files: Vec<(Option<Word>, u8)>,
    envs: Vec<u8>,
    kind: Option<Word>,
    options: Option<GeneratorOptions>,
}

#[derive(Arbitrary, Debug)]
struct GeneratorOptions {
    disable_hash: Option<bool>,
    labels: Vec<(Word, Word)>,
    annotations: Vec<(Word, Word)>,
    immutable: Option<bool>,
}

/// Rendering state: the repetition index `{i}` words take, and a count of anchors per file.
#[derive(Default)]
struct Out {
    text: String,
    index: usize,
    anchors: usize,
    /// Plain data for a JSON form: no anchors, aliases or alias bombs (the harness parses it
    /// outside any budget).
    plain: bool,
}

impl Out {
    fn raw(&mut self, s: &str) -> &mut Self {
        self.text.push_str(s);
        self
    }

    fn quoted(&mut self, s: &str) -> &mut Self {
        self.text.push_str(&serde_json::to_string(s).expect("a string serialises"));
        self
    }

    /// Whether this text is past the room left for the tree (rendering more would be thrown away).
    fn full(&self) -> bool {
        self.text.len() > ROOM.get()
    }
}

thread_local! {
    /// Bytes the tree being rendered may still take: a file past it is not rendered further.
    static ROOM: std::cell::Cell<usize> = const { std::cell::Cell::new(MAX_TREE_BYTES) };
}

/// Whether `key` was seen already (and records it): a mapping keeps the first of equal keys, as
/// the YAML reader refuses duplicates, which would stop most trees at parsing.
fn seen(keys: &mut Vec<String>, key: String) -> bool {
    if keys.contains(&key) {
        return true;
    }
    keys.push(key);
    false
}

impl Word {
    fn text(&self, index: usize) -> String {
        match self {
            Word::Listed(i) => pick(&WORDS, *i).to_owned(),
            Word::Indexed(i) => format!("{}{index}", pick(&WORDS, *i)),
            Word::Free(s) => s.clone(),
        }
    }

    fn render(&self, out: &mut Out) {
        let text = self.text(out.index);
        out.quoted(&text);
    }
}

fn pairs(out: &mut Out, pairs: &[(Word, Word)]) {
    out.raw("{");
    let mut keys = Vec::new();
    for (k, v) in pairs {
        if seen(&mut keys, k.text(out.index)) {
            continue;
        }
        if keys.len() > 1 {
            out.raw(", ");
        }
        k.render(out);
        out.raw(": ");
        v.render(out);
    }
    out.raw("}");
}

fn list<T>(out: &mut Out, items: &[T], mut each: impl FnMut(&mut Out, &T)) {
    out.raw("[");
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            out.raw(", ");
        }
        each(out, item);
    }
    out.raw("]");
}

impl Node {
    fn render(&self, out: &mut Out) {
        if out.full() {
            return;
        }
        match self {
            Node::Null => {
                out.raw("null");
            }
            Node::Bool(b) => {
                out.raw(if *b { "true" } else { "false" });
            }
            Node::Int(i) => {
                let _ = write!(out.text, "{i}");
            }
            Node::Float(f) => {
                let _ = write!(out.text, "{f:?}");
            }
            Node::Str(w) => w.render(out),
            Node::Map(entries) => {
                out.raw("{");
                let mut keys = Vec::new();
                for (k, v) in entries {
                    if seen(&mut keys, k.text(out.index)) {
                        continue;
                    }
                    if keys.len() > 1 {
                        out.raw(", ");
                    }
                    k.render(out);
                    out.raw(": ");
                    v.render(out);
                }
                out.raw("}");
            }
            Node::List(items) => list(out, items, |out, item| item.render(out)),
            Node::Chain { depth, key, leaf } => {
                let key = serde_json::to_string(&key.text(out.index)).expect("a string serialises");
                for _ in 0..*depth {
                    out.raw("{").raw(&key).raw(": ");
                }
                leaf.render(out);
                out.raw(&"}".repeat(usize::from(*depth)));
            }
            Node::Anchor(_, node) if out.plain => node.render(out),
            Node::Alias(_) | Node::Bomb { .. } if out.plain => {
                out.raw("null");
            }
            Node::Anchor(a, node) => {
                let _ = write!(out.text, "&a{a} ");
                out.anchors += 1;
                node.render(out);
            }
            Node::Alias(a) => {
                let _ = write!(out.text, "*a{a}");
            }
            Node::Bomb { levels, width, text } => {
                let (levels, width) = (usize::from(*levels % 12), usize::from(*width % 16) + 1);
                let first = out.anchors;
                out.anchors += levels + 1;
                let _ = write!(out.text, "{{b{first}: &b{first} \"{}\"", "x".repeat(usize::from(*text % 4096)));
                for level in 1..=levels {
                    let previous = format!("*b{}", first + level - 1);
                    let _ = write!(out.text, ", b{0}: &b{0} [{1}]", first + level, vec![previous; width].join(", "));
                }
                out.raw("}");
            }
            Node::Object(object) => object.render(out),
        }
    }
}

impl Object {
    fn render(&self, out: &mut Out) {
        let (api_version, kind) = pick(&KINDS, self.kind);
        let _ = write!(out.text, "{{apiVersion: {api_version}, kind: {kind}, metadata: {{name: ");
        self.name.render(out);
        if let Some(namespace) = &self.namespace {
            out.raw(", namespace: ");
            namespace.render(out);
        }
        if !self.labels.is_empty() {
            out.raw(", labels: ");
            pairs(out, &self.labels);
        }
        if !self.annotations.is_empty() {
            out.raw(", annotations: ");
            pairs(out, &self.annotations);
        }
        out.raw("}");
        match &self.body {
            Body::None => {}
            Body::Data(data) => {
                out.raw(", data: ");
                pairs(out, data);
            }
            Body::Workload { replicas, selector, containers, volumes } => {
                out.raw(", spec: {");
                if let Some(replicas) = replicas {
                    let _ = write!(out.text, "replicas: {replicas}, ");
                }
                out.raw("selector: {matchLabels: ");
                pairs(out, selector);
                out.raw("}, template: {metadata: {labels: ");
                pairs(out, selector);
                out.raw("}, spec: {containers: ");
                list(out, containers, |out, c| c.render(out));
                out.raw(", volumes: ");
                list(out, volumes, |out, v| {
                    out.raw("{name: v, configMap: {name: ");
                    v.render(out);
                    out.raw("}}");
                });
                out.raw("}}}");
            }
            Body::Spec(node) => {
                out.raw(", spec: ");
                node.render(out);
            }
            Body::Fields(fields) => {
                let mut keys = vec!["apiVersion".to_owned(), "kind".to_owned(), "metadata".to_owned()];
                for (k, v) in fields {
                    if seen(&mut keys, k.text(out.index)) {
                        continue;
                    }
                    out.raw(", ");
                    k.render(out);
                    out.raw(": ");
                    v.render(out);
                }
            }
        }
        out.raw("}");
    }
}

impl Container {
    fn render(&self, out: &mut Out) {
        out.raw("{name: ");
        self.name.render(out);
        out.raw(", image: ");
        self.image.render(out);
        if self.config_map.is_some() || self.secret.is_some() {
            out.raw(", envFrom: [");
            if let Some(cm) = &self.config_map {
                out.raw("{configMapRef: {name: ");
                cm.render(out);
                out.raw("}}");
            }
            if let Some(secret) = &self.secret {
                if self.config_map.is_some() {
                    out.raw(", ");
                }
                out.raw("{secretRef: {name: ");
                secret.render(out);
                out.raw("}}");
            }
            out.raw("]");
        }
        if !self.args.is_empty() {
            out.raw(", args: ");
            list(out, &self.args, |out, a| a.render(out));
        }
        if let Some(directive) = &self.directive {
            out.raw(", $patch: ");
            directive.render(out);
        }
        out.raw("}");
    }
}

fn segments(out: &Out, segments: &[Segment]) -> String {
    let mut path = String::new();
    for segment in segments {
        path.push('/');
        match segment {
            Segment::Word(w) => path.push_str(&w.text(out.index).replace('~', "~0").replace('/', "~1")),
            Segment::Index(i) => path.push_str(&i.to_string()),
            Segment::Append => path.push('-'),
        }
    }
    path
}

/// A JSON patch, as a JSON array or a YAML flow list.
fn json_patch(out: &mut Out, json: bool, ops: &[Op]) {
    const OPS: [&str; 7] = ["add", "remove", "replace", "move", "copy", "test", "merge"];
    out.raw("[");
    let mut first = true;
    let outer = out.index;
    for op in ops {
        for index in 0..usize::from(op.repeat).max(1) {
            if out.full() {
                break;
            }
            out.index = index;
            if !first {
                out.raw(",\n");
            }
            first = false;
            let quote = |s: &str| if json { format!("\"{s}\"") } else { s.to_owned() };
            let path = serde_json::to_string(&segments(out, &op.path)).expect("a string serialises");
            let _ = write!(out.text, "{{{}: {}, {}: {path}", quote("op"), quote(pick(&OPS, op.op)), quote("path"));
            if let Some(from) = &op.from {
                let from = serde_json::to_string(&segments(out, from)).expect("a string serialises");
                let _ = write!(out.text, ", {}: {from}", quote("from"));
            }
            if let Some(value) = &op.value {
                let _ = write!(out.text, ", {}: ", quote("value"));
                if json {
                    // Anchors are YAML's: the JSON form carries a plain value, without aliases
                    // (so that reading it here costs no more than its text).
                    let mut inner = Out { index, plain: true, ..Out::default() };
                    value.render(&mut inner);
                    match crate_yaml_to_json(&inner.text) {
                        Some(text) => out.raw(&text),
                        None => out.raw("null"),
                    };
                } else {
                    value.render(out);
                }
            }
            out.raw("}");
        }
    }
    out.index = outer;
    out.raw("]");
}

/// A YAML flow value as JSON text (keys and scalars quoted), through cdtarget's YAML reader
/// outside any load (nothing is charged).
fn crate_yaml_to_json(text: &str) -> Option<String> {
    let value = cdtarget::yaml::parse_one(text).ok()?;
    serde_json::to_string(&value).ok()
}

impl Tree {
    /// The files the tree stands for (a later file of the same path replaces an earlier one).
    fn render(&self) -> Vec<SourceFile> {
        let mut files: Vec<SourceFile> = Vec::new();
        let mut total = 0;
        let mut add = |path: String, text: String| {
            total += text.len();
            ROOM.set(MAX_TREE_BYTES.saturating_sub(total));
            if total > MAX_TREE_BYTES {
                return;
            }
            files.retain(|f| f.path != path);
            if files.len() < MAX_FILES {
                files.push(SourceFile { path, text });
            }
        };
        ROOM.set(MAX_TREE_BYTES);
        // One kustomization file a directory (the first named): several are refused before the
        // build.
        let mut kustomized: Vec<&str> = Vec::new();
        for dir in &self.dirs {
            let at = pick(&DIRS, dir.at);
            let join = |name: &str| if at.is_empty() { name.to_owned() } else { format!("{at}/{name}") };
            for file in &dir.files {
                let name = match &file.name {
                    FileName::Listed(i) => pick(&FILES, *i).to_owned(),
                    FileName::Free(s) => s.clone(),
                };
                add(join(&name), file.content.render());
            }
            if let Some(k) = &dir.kustomization
                && !kustomized.contains(&at)
            {
                kustomized.push(at);
                add(join(pick(&KUSTOMIZATION_NAMES, k.name)), k.render(at));
            }
        }
        ROOM.set(MAX_TREE_BYTES);
        files
    }
}

impl FileContent {
    fn render(&self) -> String {
        let mut out = Out::default();
        match self {
            FileContent::Objects(objects) => {
                for object in objects {
                    out.raw("---\n");
                    object.render(&mut out);
                    out.raw("\n");
                }
            }
            FileContent::Many { count, object } => {
                for index in 0..usize::from(*count).min(MAX_REPEAT) {
                    if out.full() {
                        break;
                    }
                    out.index = index;
                    out.raw("---\n");
                    object.render(&mut out);
                    out.raw("\n");
                }
            }
            FileContent::JsonPatch { json, ops } => json_patch(&mut out, *json, ops),
            FileContent::Env(lines) => {
                for (k, v) in lines {
                    let (k, v) = (k.text(0), v.text(0));
                    let _ = writeln!(out.text, "{k}={v}");
                }
            }
            FileContent::Snippet(node) => node.render(&mut out),
            FileContent::Raw(bytes) => return String::from_utf8_lossy(bytes).into_owned(),
        }
        out.text
    }
}

/// `to` relative to directory `from`.
fn relative(from: &str, to: &str) -> String {
    let from: Vec<&str> = from.split('/').filter(|s| !s.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|s| !s.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    if parts.is_empty() { ".".to_owned() } else { parts.join("/") }
}

impl Ref {
    fn text(&self, at: &str, index: usize) -> String {
        match self {
            Ref::File(i) => pick(&FILES, *i).to_owned(),
            Ref::Dir(i) => relative(at, pick(&DIRS, *i)),
            Ref::Word(w) => w.text(index),
        }
    }
}

impl Kustomization {
    fn render(&self, at: &str) -> String {
        let mut out = Out::default();
        let mut keys = Vec::new();
        let (open, between, close) = if self.block { ("", "\n", "\n") } else { ("{", ",\n", "}\n") };
        out.raw(open);
        if self.header {
            let (api_version, kind) = if self.component {
                ("kustomize.config.k8s.io/v1alpha1", "Component")
            } else {
                ("kustomize.config.k8s.io/v1beta1", "Kustomization")
            };
            let _ = write!(out.text, "apiVersion: {api_version}{between}kind: {kind}");
            keys.extend(["apiVersion".to_owned(), "kind".to_owned()]);
        }
        for field in &self.fields {
            if out.full() {
                break;
            }
            if seen(&mut keys, field.key()) {
                continue;
            }
            if keys.len() > 1 {
                out.raw(between);
            }
            field.render(&mut out, at);
        }
        out.raw(close);
        out.text
    }
}

impl Field {
    /// The key the field is written under.
    fn key(&self) -> String {
        match self {
            Field::Resources(_) => "resources",
            Field::Bases(_) => "bases",
            Field::Components(_) | Field::RepeatedComponent { .. } => "components",
            Field::Namespace(_) => "namespace",
            Field::NamePrefix(_) => "namePrefix",
            Field::NameSuffix(_) => "nameSuffix",
            Field::CommonLabels(_) => "commonLabels",
            Field::Labels(_) => "labels",
            Field::CommonAnnotations(_) => "commonAnnotations",
            Field::Images(_) => "images",
            Field::Replicas(_) => "replicas",
            Field::Patches(_) | Field::ManyPatches { .. } => "patches",
            Field::PatchesStrategicMerge(_) => "patchesStrategicMerge",
            Field::PatchesJson6902(_) => "patchesJson6902",
            Field::ConfigMapGenerator(_) => "configMapGenerator",
            Field::SecretGenerator(_) => "secretGenerator",
            Field::GeneratorOptions(_) => "generatorOptions",
            Field::SortOptions { .. } => "sortOptions",
            Field::Other(key, _) => return key.text(0),
        }
        .to_owned()
    }

    fn render(&self, out: &mut Out, at: &str) {
        let refs = |out: &mut Out, key: &str, refs: &[Ref]| {
            out.raw(key).raw(": ");
            list(out, refs, |out, r| {
                let text = r.text(at, out.index);
                out.quoted(&text);
            });
        };
        match self {
            Field::Resources(r) => refs(out, "resources", r),
            Field::Bases(r) => refs(out, "bases", r),
            Field::Components(r) => refs(out, "components", r),
            Field::RepeatedComponent { count, to } => {
                out.raw("components: [");
                for index in 0..usize::from(*count).min(MAX_REPEAT) {
                    if index > 0 {
                        out.raw(", ");
                    }
                    out.quoted(&to.text(at, index));
                }
                out.raw("]");
            }
            Field::Namespace(w) => {
                out.raw("namespace: ");
                w.render(out);
            }
            Field::NamePrefix(w) => {
                out.raw("namePrefix: ");
                w.render(out);
            }
            Field::NameSuffix(w) => {
                out.raw("nameSuffix: ");
                w.render(out);
            }
            Field::CommonLabels(p) => {
                out.raw("commonLabels: ");
                pairs(out, p);
            }
            Field::Labels(sets) => {
                out.raw("labels: ");
                list(out, sets, |out, set| {
                    out.raw("{pairs: ");
                    pairs(out, &set.pairs);
                    if let Some(selectors) = set.selectors {
                        let _ = write!(out.text, ", includeSelectors: {selectors}");
                    }
                    if let Some(templates) = set.templates {
                        let _ = write!(out.text, ", includeTemplates: {templates}");
                    }
                    out.raw("}");
                });
            }
            Field::CommonAnnotations(p) => {
                out.raw("commonAnnotations: ");
                pairs(out, p);
            }
            Field::Images(images) => {
                out.raw("images: ");
                list(out, images, |out, image| {
                    out.raw("{name: ");
                    image.name.render(out);
                    for (key, value) in
                        [("newName", &image.new_name), ("newTag", &image.new_tag), ("digest", &image.digest)]
                    {
                        if let Some(value) = value {
                            out.raw(", ").raw(key).raw(": ");
                            value.render(out);
                        }
                    }
                    out.raw("}");
                });
            }
            Field::Replicas(replicas) => {
                out.raw("replicas: ");
                list(out, replicas, |out, (name, count)| {
                    out.raw("{name: ");
                    name.render(out);
                    out.raw(", count: ");
                    count.render(out);
                    out.raw("}");
                });
            }
            Field::Patches(patches) => {
                out.raw("patches: ");
                list(out, patches, |out, patch| patch.render(out));
            }
            Field::ManyPatches { count, patch } => {
                out.raw("patches: [");
                let outer = out.index;
                for index in 0..usize::from(*count).min(MAX_REPEAT) {
                    if out.full() {
                        break;
                    }
                    if index > 0 {
                        out.raw(",\n");
                    }
                    out.index = index;
                    patch.render(out);
                }
                out.index = outer;
                out.raw("]");
            }
            Field::PatchesStrategicMerge(sources) => {
                out.raw("patchesStrategicMerge: ");
                list(out, sources, |out, source| match source {
                    PatchSource::Path(i) => {
                        out.quoted(pick(&FILES, *i));
                    }
                    PatchSource::Inline(body) => {
                        let text = body.text(out.index);
                        out.quoted(&text);
                    }
                });
            }
            Field::PatchesJson6902(patches) => {
                out.raw("patchesJson6902: ");
                list(out, patches, |out, (target, source)| {
                    out.raw("{target: ");
                    target.render(out);
                    source.render(out);
                    out.raw("}");
                });
            }
            Field::ConfigMapGenerator(generators) => {
                out.raw("configMapGenerator: ");
                list(out, generators, |out, g| g.render(out));
            }
            Field::SecretGenerator(generators) => {
                out.raw("secretGenerator: ");
                list(out, generators, |out, g| g.render(out));
            }
            Field::GeneratorOptions(options) => {
                out.raw("generatorOptions: ");
                options.render(out);
            }
            Field::SortOptions { fifo, first, last } => {
                if *fifo {
                    out.raw("sortOptions: {order: fifo}");
                } else {
                    out.raw("sortOptions: {order: legacy, legacySortOptions: {orderFirst: ");
                    list(out, first, |out, w| w.render(out));
                    out.raw(", orderLast: ");
                    list(out, last, |out, w| w.render(out));
                    out.raw("}}");
                }
            }
            Field::Other(key, value) => {
                key.render(out);
                out.raw(": ");
                value.render(out);
            }
        }
    }
}

impl PatchBody {
    /// The patch as the text of a file (or of an inline `patch`).
    fn text(&self, index: usize) -> String {
        let mut out = Out { index, ..Out::default() };
        match self {
            PatchBody::Strategic(object) => object.render(&mut out),
            PatchBody::Json { json, ops } => json_patch(&mut out, *json, ops),
            PatchBody::Snippet(node) => node.render(&mut out),
        }
        out.text
    }
}

impl PatchSource {
    /// `, path: ...` or `, patch: ...`.
    fn render(&self, out: &mut Out) {
        match self {
            PatchSource::Path(i) => {
                out.raw(", path: ");
                out.quoted(pick(&FILES, *i));
            }
            PatchSource::Inline(body) => {
                let text = body.text(out.index);
                out.raw(", patch: ");
                out.quoted(&text);
            }
        }
    }
}

impl Patch {
    fn render(&self, out: &mut Out) {
        out.raw("{");
        match &self.source {
            PatchSource::Path(i) => {
                out.raw("path: ");
                out.quoted(pick(&FILES, *i));
            }
            PatchSource::Inline(body) => {
                let text = body.text(out.index);
                out.raw("patch: ");
                out.quoted(&text);
            }
        }
        if let Some(target) = &self.target {
            out.raw(", target: ");
            target.render(out);
        }
        if let Some((allow_name_change, allow_kind_change)) = self.options {
            let _ = write!(
                out.text,
                ", options: {{allowNameChange: {allow_name_change}, allowKindChange: {allow_kind_change}}}"
            );
        }
        out.raw("}");
    }
}

impl Target {
    fn render(&self, out: &mut Out) {
        out.raw("{");
        let fields = [
            ("group", &self.group),
            ("version", &self.version),
            ("kind", &self.kind),
            ("name", &self.name),
            ("namespace", &self.namespace),
            ("labelSelector", &self.label_selector),
            ("annotationSelector", &self.annotation_selector),
        ];
        let mut first = true;
        for (key, value) in fields {
            if let Some(value) = value {
                if !first {
                    out.raw(", ");
                }
                first = false;
                out.raw(key).raw(": ");
                value.render(out);
            }
        }
        out.raw("}");
    }
}

impl Generator {
    fn render(&self, out: &mut Out) {
        const BEHAVIORS: [&str; 4] = ["create", "merge", "replace", "append"];
        out.raw("{name: ");
        self.name.render(out);
        if let Some(namespace) = &self.namespace {
            out.raw(", namespace: ");
            namespace.render(out);
        }
        if let Some(behavior) = self.behavior {
            let _ = write!(out.text, ", behavior: {}", pick(&BEHAVIORS, behavior));
        }
        if let Some(kind) = &self.kind {
            out.raw(", type: ");
            kind.render(out);
        }
        if !self.literals.is_empty() {
            out.raw(", literals: ");
            list(out, &self.literals, |out, (k, v)| {
                let literal = format!("{}={}", k.text(out.index), v.text(out.index));
                out.quoted(&literal);
            });
        }
        if !self.files.is_empty() {
            out.raw(", files: ");
            list(out, &self.files, |out, (key, file)| {
                let source = match key {
                    Some(key) => format!("{}={}", key.text(out.index), pick(&FILES, *file)),
                    None => pick(&FILES, *file).to_owned(),
                };
                out.quoted(&source);
            });
        }
        if !self.envs.is_empty() {
            out.raw(", envs: ");
            list(out, &self.envs, |out, file| {
                out.quoted(pick(&FILES, *file));
            });
        }
        if let Some(options) = &self.options {
            out.raw(", options: ");
            options.render(out);
        }
        out.raw("}");
    }
}

impl GeneratorOptions {
    fn render(&self, out: &mut Out) {
        out.raw("{labels: ");
        pairs(out, &self.labels);
        out.raw(", annotations: ");
        pairs(out, &self.annotations);
        if let Some(disable) = self.disable_hash {
            let _ = write!(out.text, ", disableNameSuffixHash: {disable}");
        }
        if let Some(immutable) = self.immutable {
            let _ = write!(out.text, ", immutable: {immutable}");
        }
        out.raw("}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_tree_expands_its_repetitions() {
        let files =
            text_tree("@@ a.yaml\nx: [{{3*d{i},*}}] {{2*{{2*a*}}b*}}\n@@ b/kustomization.yaml\nresources: []\n");
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].text, "x: [d0,d1,d2,] aabaab\n");
        assert_eq!(files[1].path, "b/kustomization.yaml");
    }

    fn listed(word: &str) -> Word {
        Word::Listed(WORDS.iter().position(|w| *w == word).expect("a listed word") as u8)
    }

    /// The structured encoding reaches builds that are accepted: a base with a Deployment and a
    /// generated ConfigMap it uses, an overlay with a prefix and a targeted JSON patch (JSON form,
    /// an anchor in its value), duplicate fields and keys written once.
    #[test]
    fn a_structured_tree_builds() {
        let deployment = Object {
            kind: 2,
            name: listed("web"),
            namespace: None,
            labels: vec![(listed("app"), listed("web")), (listed("app"), listed("x"))],
            annotations: vec![],
            body: Body::Workload {
                replicas: Some(1),
                selector: vec![(listed("app"), listed("web"))],
                containers: vec![Container {
                    name: listed("web"),
                    image: listed("nginx"),
                    config_map: Some(listed("config")),
                    secret: None,
                    args: vec![listed("a")],
                    directive: None,
                }],
                volumes: vec![listed("config")],
            },
        };
        let generator = Generator {
            name: listed("config"),
            namespace: None,
            behavior: None,
            literals: vec![(listed("k=v"), listed("x"))],
            files: vec![],
            envs: vec![],
            kind: None,
            options: None,
        };
        let op = Op {
            op: 0,
            path: vec![Segment::Word(listed("metadata")), Segment::Word(listed("annotations"))],
            from: None,
            value: Some(Node::Map(vec![(listed("a"), Node::Anchor(1, Box::new(Node::Str(listed("b")))))])),
            repeat: 1,
        };
        let base = Dir {
            at: 1,
            kustomization: Some(Kustomization {
                name: 0,
                component: false,
                header: true,
                block: false,
                fields: vec![
                    Field::Resources(vec![Ref::File(0)]),
                    Field::ConfigMapGenerator(vec![generator]),
                    Field::Resources(vec![Ref::File(1)]),
                ],
            }),
            files: vec![File { name: FileName::Listed(0), content: FileContent::Objects(vec![deployment]) }],
        };
        let overlay = Dir {
            at: 3,
            kustomization: Some(Kustomization {
                name: 1,
                component: false,
                header: false,
                block: true,
                fields: vec![
                    Field::Resources(vec![Ref::Dir(1)]),
                    Field::NamePrefix(listed("a")),
                    Field::Patches(vec![Patch {
                        source: PatchSource::Inline(PatchBody::Json { json: true, ops: vec![op] }),
                        target: Some(Target {
                            group: None,
                            version: None,
                            kind: Some(listed("Deployment")),
                            name: None,
                            namespace: None,
                            label_selector: None,
                            annotation_selector: None,
                        }),
                        options: None,
                    }]),
                    Field::NamePrefix(listed("b")),
                ],
            }),
            files: vec![],
        };
        let files = Tree { dirs: vec![base, overlay] }.render();
        let texts: Vec<&str> = files.iter().map(|f| f.text.as_str()).collect();
        let budget = Rc::new(Budget::new(limits()));
        let _entered = budget.enter();
        let set = manifests::load(files.clone(), NAMESPACE, &Policy::default())
            .unwrap_or_else(|p| panic!("refused: {p:#?}\n{texts:#?}"));
        let names: Vec<&str> = set.documents.iter().map(|d| d.name()).collect();
        // Both outermost directories are built: the base alone, and the overlay over it.
        assert_eq!(set.documents.len(), 4, "{names:?}");
        assert!(names.contains(&"aweb") && names.contains(&"web"), "{names:?}");
        assert!(names.iter().any(|n| n.starts_with("aconfig-")), "generated, prefixed and hashed: {names:?}");
        drop(_entered);
        check_files(files);
    }

    #[test]
    fn relative_paths_climb_and_descend() {
        assert_eq!(relative("overlays/prod", "base"), "../../base");
        assert_eq!(relative("", "base/common"), "base/common");
        assert_eq!(relative("base", "base/common"), "common");
        assert_eq!(relative("base", "base"), ".");
    }
}
