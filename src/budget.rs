//! The budget of one revision: what loading a tenant's tree may produce and the work it may
//! cost, charged as it is produced.
//!
//! A revision is loaded in one thread ([`crate::manifests`]); the YAML reader, the kustomize
//! build and the loader charge one [`Budget`] for every object byte they make (after alias
//! expansion, patches, prefixes, annotations and the earlier names a build keeps), every object,
//! every unit of super-linear work and the depth of every object they are about to recurse over.
//! The first overrun is sticky: every later charge fails with it, so the load stops early and
//! reports that one limit at the file or kustomization entry where it was crossed.
//!
//! The budget is the loader's one ambient value ([`Budget::enter`] installs it for the current
//! thread): serde's `Deserialize` has no context to pass it through, and the build's many
//! transformers would otherwise each take one more argument. Outside a load (the admins' policy,
//! tests of single functions) nothing is charged.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Deepest object a revision may hold (mappings and lists nested in one another). Every
/// recursion over tenant data (serde's parse, clone, drop and serialisation, the strategic merge,
/// the label walks) goes at most about twice this deep before the depth is checked, which the
/// loader thread's stack is sized for ([`LOADER_STACK_BYTES`]).
pub const MAX_DEPTH: usize = 64;

/// The stack of the thread a revision is loaded on: recursion over tenant data is bounded by
/// [`MAX_DEPTH`] (checked after every patch operation and transformer, before anything recurses
/// over the result), and at that bound the deepest recursion measured needs well under 2 MiB
/// (tokio's blocking threads; the attack tests run the loader on 2 MiB). Twice that is kept
/// for the frames of the readers and the build around it.
pub const LOADER_STACK_BYTES: usize = 4 << 20;

/// Bounds on one revision's load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Estimated memory of the objects produced (and of parsed kustomizations and patches), in
    /// bytes.
    pub bytes: u64,
    /// Objects produced (read from files or generated; an object a build reaches twice counts
    /// twice).
    pub objects: usize,
    /// Deepest nesting of any object.
    pub depth: usize,
    /// Units of work: a node of an object measured, a patch target tried against an object, a
    /// candidate of a name reference compared.
    pub work: u64,
    /// Problems kept and reported; the rest are counted ("and N more").
    pub problems: usize,
    /// Time the whole load may take.
    pub deadline: Duration,
}

impl Default for Limits {
    /// 64 MiB of objects, 10,000 objects, depth 64, 200 million units of work (a few seconds of
    /// CPU), 100 problems, 60 s (docs/security.md says why each).
    fn default() -> Self {
        Limits {
            bytes: 64 << 20,
            objects: 10_000,
            depth: MAX_DEPTH,
            work: 200_000_000,
            problems: 100,
            deadline: Duration::from_secs(60),
        }
    }
}

/// Which limit a load crossed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Overrun {
    /// More than [`Limits::bytes`] of objects.
    Bytes(u64),
    /// More than [`Limits::objects`] objects.
    Objects(usize),
    /// An object nested deeper than [`Limits::depth`].
    Depth(usize),
    /// More than [`Limits::work`] units of work.
    Work(u64),
    /// Longer than [`Limits::deadline`].
    Deadline(Duration),
    /// Abandoned by the caller (it stopped waiting).
    Abandoned,
}

impl fmt::Display for Overrun {
    /// What was crossed, the limit, and what the tenant can do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overrun::Bytes(limit) => write!(
                f,
                "this revision would produce more than {} MiB of objects (counted after YAML aliases, patches, \
                 prefixes, labels and annotations), the limit of one revision: make the objects smaller or fewer, \
                 or ask the platform team",
                limit >> 20
            ),
            Overrun::Objects(limit) => write!(
                f,
                "this revision would produce more than {limit} objects (a base reached from several overlays \
                 counts each time), the limit of one revision: split the repository or ask the platform team"
            ),
            Overrun::Depth(limit) => write!(
                f,
                "an object is nested more than {limit} levels deep (mappings and lists within one another), the \
                 limit for any object: flatten it"
            ),
            Overrun::Work(limit) => write!(
                f,
                "building this revision would take more than {limit} steps of work (patch targets tried against \
                 objects, objects walked), the limit of one revision: give patches narrower targets or use fewer"
            ),
            Overrun::Deadline(limit) => write!(
                f,
                "loading this revision took longer than {} s and was abandoned, the limit of one revision: \
                 make it smaller or simpler",
                limit.as_secs()
            ),
            Overrun::Abandoned => f.write_str("loading this revision was abandoned before it finished"),
        }
    }
}

/// The estimated memory and depth of a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measure {
    /// Estimated heap bytes: a fixed cost per node, map entry and list item, plus text lengths.
    pub bytes: u64,
    /// Levels of nesting (a scalar is 1, a map of scalars 2).
    pub depth: usize,
    /// Nodes visited.
    pub nodes: u64,
}

/// The cost of one `serde_json::Value` in place (its enum).
pub const NODE_BYTES: u64 = 32;
/// The added cost of one map entry: its key's `String` and the map's per-entry overhead.
pub const ENTRY_BYTES: u64 = 48;

/// Measures `value` without recursion, stopping (with `depth` past `limit`) at the first node
/// deeper than `limit`.
pub fn measure(value: &Value, limit: usize) -> Measure {
    let mut found = Measure::default();
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((value, depth)) = stack.pop() {
        found.nodes += 1;
        found.bytes += NODE_BYTES;
        found.depth = found.depth.max(depth);
        if depth > limit {
            return found;
        }
        match value {
            Value::String(text) => found.bytes += text.len() as u64,
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => {
                for (key, item) in map {
                    found.bytes += ENTRY_BYTES + key.len() as u64;
                    stack.push((item, depth + 1));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    found
}

/// The budget of one revision's load.
#[derive(Debug)]
pub struct Budget {
    limits: Limits,
    started: Instant,
    bytes: Cell<u64>,
    objects: Cell<usize>,
    work: Cell<u64>,
    // Work since the clock was last read: reading it on every charge would cost more than most
    // charges.
    unclocked: Cell<u64>,
    overrun: RefCell<Option<Overrun>>,
    abandoned: Arc<AtomicBool>,
}

/// Work between two looks at the clock and at the abandon flag.
const CLOCK_EVERY: u64 = 1 << 16;

impl Budget {
    /// A fresh budget under `limits`, its deadline counted from now.
    pub fn new(limits: Limits) -> Self {
        Budget {
            limits,
            started: Instant::now(),
            bytes: Cell::new(0),
            objects: Cell::new(0),
            work: Cell::new(0),
            unclocked: Cell::new(0),
            overrun: RefCell::new(None),
            abandoned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The same budget, abandoned once another thread sets `flag` (the caller's deadline).
    pub fn abandoned_by(mut self, flag: Arc<AtomicBool>) -> Self {
        self.abandoned = flag;
        self
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A flag another thread sets to abandon the load: the next look at the clock fails.
    pub fn abandon_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.abandoned)
    }

    /// The first limit crossed, if any.
    pub fn overrun(&self) -> Option<Overrun> {
        self.overrun.borrow().clone()
    }

    /// Object bytes charged so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.get()
    }

    /// Objects counted so far.
    pub fn objects(&self) -> usize {
        self.objects.get()
    }

    /// Work charged so far.
    pub fn work(&self) -> u64 {
        self.work.get()
    }

    fn fail(&self, overrun: Overrun) -> Overrun {
        self.overrun.borrow_mut().get_or_insert(overrun).clone()
    }

    fn sticky(&self) -> Result<(), Overrun> {
        match &*self.overrun.borrow() {
            Some(overrun) => Err(overrun.clone()),
            None => Ok(()),
        }
    }

    /// Charges `bytes` of objects produced.
    pub fn charge_bytes(&self, bytes: u64) -> Result<(), Overrun> {
        self.sticky()?;
        let total = self.bytes.get().saturating_add(bytes);
        self.bytes.set(total);
        if total > self.limits.bytes {
            return Err(self.fail(Overrun::Bytes(self.limits.bytes)));
        }
        Ok(())
    }

    /// Gives back `bytes` an object no longer holds (a patch that shrank it).
    pub fn release_bytes(&self, bytes: u64) {
        self.bytes.set(self.bytes.get().saturating_sub(bytes));
    }

    /// Counts `count` objects produced.
    pub fn count_objects(&self, count: usize) -> Result<(), Overrun> {
        self.sticky()?;
        let total = self.objects.get().saturating_add(count);
        self.objects.set(total);
        if total > self.limits.objects {
            return Err(self.fail(Overrun::Objects(self.limits.objects)));
        }
        Ok(())
    }

    /// Charges `units` of work, and looks at the clock and the abandon flag now and then.
    pub fn charge_work(&self, units: u64) -> Result<(), Overrun> {
        self.sticky()?;
        let total = self.work.get().saturating_add(units);
        self.work.set(total);
        if total > self.limits.work {
            return Err(self.fail(Overrun::Work(self.limits.work)));
        }
        let unclocked = self.unclocked.get().saturating_add(units);
        if unclocked < CLOCK_EVERY {
            self.unclocked.set(unclocked);
            return Ok(());
        }
        self.unclocked.set(0);
        self.check_clock()
    }

    /// Fails once the deadline has passed or the load was abandoned.
    pub fn check_clock(&self) -> Result<(), Overrun> {
        self.sticky()?;
        if self.abandoned.load(Ordering::Relaxed) {
            return Err(self.fail(Overrun::Abandoned));
        }
        if self.started.elapsed() >= self.limits.deadline {
            return Err(self.fail(Overrun::Deadline(self.limits.deadline)));
        }
        Ok(())
    }

    /// Fails when `depth` is past the limit.
    pub fn check_depth(&self, depth: usize) -> Result<(), Overrun> {
        self.sticky()?;
        if depth > self.limits.depth {
            return Err(self.fail(Overrun::Depth(self.limits.depth)));
        }
        Ok(())
    }

    /// Measures `value` (charging the walk as work) and checks its depth; its bytes are not
    /// charged.
    pub fn measure(&self, value: &Value) -> Result<Measure, Overrun> {
        let found = measure(value, self.limits.depth);
        self.charge_work(found.nodes)?;
        self.check_depth(found.depth)?;
        Ok(found)
    }

    /// Fails when a value that was `before` bytes could not grow to `now` within the budget,
    /// charging nothing (a patch checks each operation on a copy that may still be dropped).
    pub fn check_growth(&self, before: u64, now: u64) -> Result<(), Overrun> {
        self.sticky()?;
        if self.bytes.get().saturating_add(now.saturating_sub(before)) > self.limits.bytes {
            return Err(self.fail(Overrun::Bytes(self.limits.bytes)));
        }
        Ok(())
    }

    /// Charges the growth of a value that was `before` bytes and is now `value`, checking its
    /// depth; returns its bytes now.
    pub fn remeasure(&self, before: u64, value: &Value) -> Result<u64, Overrun> {
        let now = self.measure(value)?.bytes;
        if now >= before {
            self.charge_bytes(now - before)?;
        } else {
            self.release_bytes(before - now);
        }
        Ok(now)
    }

    /// Installs this budget for the current thread until the guard is dropped (the one it
    /// replaces comes back then).
    pub fn enter(self: &Rc<Self>) -> Entered {
        let previous = CURRENT.with(|current| current.replace(Some(Rc::clone(self))));
        Entered { previous }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Budget>>> = const { RefCell::new(None) };
}

/// The budget installed on this thread, until dropped.
#[must_use = "the budget is installed only while the guard lives"]
pub struct Entered {
    previous: Option<Rc<Budget>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|current| *current.borrow_mut() = previous);
    }
}

/// Runs `load` on a thread of its own whose stack is [`LOADER_STACK_BYTES`] (never tokio's
/// blocking pool, whose 2 MiB threads other work shares), named `name`.
pub fn spawn_loader<T: Send + 'static>(
    name: &str,
    load: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new().name(name.to_owned()).stack_size(LOADER_STACK_BYTES).spawn(load)
}

/// The budget installed on this thread, if any.
pub fn current() -> Option<Rc<Budget>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// Runs `charge` against the current budget; nothing is charged (`Ok`) outside a load.
pub fn charge(charge: impl FnOnce(&Budget) -> Result<(), Overrun>) -> Result<(), Overrun> {
    match current() {
        Some(budget) => charge(&budget),
        None => Ok(()),
    }
}

/// The depth limit in force: the current budget's, else [`MAX_DEPTH`].
pub fn depth_limit() -> usize {
    current().map_or(MAX_DEPTH, |budget| budget.limits.depth)
}

/// The number of problems kept: the current budget's, else the default.
pub fn problem_limit() -> usize {
    current().map_or(Limits::default().problems, |budget| budget.limits.problems)
}

/// Measures `value` against the current budget and charges its bytes (a value just produced).
pub fn charge_value(value: &Value) -> Result<u64, Overrun> {
    match current() {
        Some(budget) => {
            let found = budget.measure(value)?;
            budget.charge_bytes(found.bytes)?;
            Ok(found.bytes)
        }
        None => Ok(measure(value, usize::MAX).bytes),
    }
}

/// Charges the growth of a value that was `before` bytes (see [`Budget::remeasure`]); outside a
/// load it only measures.
pub fn recharge(before: u64, value: &Value) -> Result<u64, Overrun> {
    match current() {
        Some(budget) => budget.remeasure(before, value),
        None => Ok(measure(value, usize::MAX).bytes),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn small(limits: impl FnOnce(&mut Limits)) -> Rc<Budget> {
        let mut chosen = Limits::default();
        limits(&mut chosen);
        Rc::new(Budget::new(chosen))
    }

    #[test]
    fn measure_counts_nodes_entries_and_text_without_recursing() {
        let found = measure(&json!({"ab": "xyz", "l": [1, true]}), MAX_DEPTH);
        // Root, two entries ("ab" 2 + "l" 1 bytes of keys), the string (3), the list, two items.
        assert_eq!(found.nodes, 5);
        assert_eq!(found.bytes, 5 * NODE_BYTES + 2 * ENTRY_BYTES + 3 + 3);
        assert_eq!(found.depth, 3);
        // A chain far deeper than any stack would allow a recursive walk.
        let mut deep = json!(1);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(measure(&deep, MAX_DEPTH).depth, MAX_DEPTH + 1, "stops past the limit");
        // serde_json's recursive drop of such a chain would overflow: taken apart by hand.
        while let Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn each_limit_is_refused_once_crossed_and_stays_crossed() {
        let budget = small(|l| l.bytes = 100);
        budget.charge_bytes(100).unwrap();
        assert_eq!(budget.charge_bytes(1), Err(Overrun::Bytes(100)));
        assert_eq!(budget.count_objects(1), Err(Overrun::Bytes(100)), "sticky: the first overrun is reported");

        let budget = small(|l| l.objects = 2);
        budget.count_objects(2).unwrap();
        assert_eq!(budget.count_objects(1), Err(Overrun::Objects(2)));

        let budget = small(|l| l.work = 10);
        assert_eq!(budget.charge_work(11), Err(Overrun::Work(10)));

        let budget = small(|l| l.depth = 3);
        assert_eq!(budget.measure(&json!({"a": {"b": 1}})).unwrap().depth, 3);
        assert_eq!(budget.measure(&json!({"a": {"b": [1]}})), Err(Overrun::Depth(3)));
    }

    #[test]
    fn the_deadline_and_the_abandon_flag_stop_work() {
        // A deadline of zero has passed at the first look at the clock: no waiting needed.
        let budget = small(|l| l.deadline = Duration::ZERO);
        assert_eq!(budget.charge_work(CLOCK_EVERY), Err(Overrun::Deadline(Duration::ZERO)));

        let budget = small(|_| {});
        budget.abandon_flag().store(true, Ordering::Relaxed);
        budget.charge_work(1).expect("the clock is read only now and then");
        assert_eq!(budget.charge_work(CLOCK_EVERY), Err(Overrun::Abandoned));
    }

    #[test]
    fn remeasuring_charges_growth_and_gives_back_shrinkage() {
        let budget = small(|_| {});
        let _entered = budget.enter();
        let mut value = json!({"a": "x"});
        let before = charge_value(&value).unwrap();
        assert_eq!(budget.bytes(), before);
        value["b"] = json!("y".repeat(1000));
        let after = recharge(before, &value).unwrap();
        assert!(after > before + 1000);
        assert_eq!(budget.bytes(), after);
        let shrunk = recharge(after, &json!({})).unwrap();
        assert_eq!(budget.bytes(), shrunk);
    }

    #[test]
    fn outside_a_load_nothing_is_charged() {
        assert!(current().is_none());
        charge(|_| Err(Overrun::Abandoned)).unwrap();
        let budget = small(|_| {});
        {
            let _entered = budget.enter();
            assert!(current().is_some());
        }
        assert!(current().is_none(), "the guard restores what was there");
    }
}
