//! What each running statement holds, counted by the allocator: the backstop under the
//! `query_memory` pool.
//!
//! The pool counts what DataFusion's operators and Tarn's own calls say they hold, and
//! what they do not say escapes it: a repartition's batches read back from its spill
//! file, a planner rule's copies of a folded constant, a recursive query's working
//! table. Each such shape took a process past 4–6 GB under a 2 GiB limit. The allocator
//! below ([`StatementAllocator`], installed by the host program) counts the bytes of
//! every large allocation made while a statement's work is being polled, against that
//! statement, until the allocation is freed — wherever and whenever it is freed — and
//! sums the small ones each thread allocates and frees while doing its work. Past
//! its backstop ([`backstop`]) the statement ends with the `query_memory` 400 at the
//! next batch any of its plan nodes passes on, and at its next poll.
//!
//! Attribution: a statement's future and every plan node's stream (see
//! `HoldExec` in `tarn-sql`) set the statement as the current one on their thread for
//! the length of each poll, so the work of tasks DataFusion spawns is counted too.
//! Each large allocation carries a header naming the statement it was made for (and
//! that statement's generation, so a block outliving its statement — a result handed
//! to the caller, rows staged in the memtable — is not subtracted from the next
//! statement to use the slot).
//!
//! Without the allocator installed (a host program's choice), nothing is counted and
//! the backstop never fires; the pool's limits hold as before.

#![allow(unsafe_code)] // the global allocator: every unsafe block says why it is sound

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::task::{Context, Poll};

/// Allocations from this size on carry a header naming their statement, so they are
/// counted against it until freed, wherever and whenever that is. Below it a header
/// would cost more than it finds (a 16-byte header on a 24-byte block); small blocks are
/// counted without one (see [`small`]).
const SMALLEST_COUNTED: usize = 4096;

/// How far a thread's uncounted sum of small blocks may drift before it is added to its
/// statement's count: the atomic add is paid once per this many bytes, not per block.
const SMALL_FLUSH: i64 = 64 << 10;

/// Statements counted at once; past this many running together, the others run
/// uncounted (the pool's limits still hold for them).
const SLOTS: usize = 256;

/// Bytes in front of each counted allocation: its statement's tag, at the allocation's
/// alignment (Arrow aligns its buffers to 64 bytes) and at least 16.
fn header(layout: Layout) -> usize {
    layout.align().max(16)
}

/// One statement's count.
struct Slot {
    /// Bumped when the slot is taken: a block's tag names the generation it was made
    /// for, and a stale one is not counted against the slot's next statement.
    generation: AtomicU32,
    in_use: AtomicBool,
    bytes: AtomicI64,
    /// The most `bytes` has been since the slot was taken.
    peak: AtomicI64,
    limit: AtomicI64,
}

#[allow(clippy::declare_interior_mutable_const)] // a template for the array below
const FREE_SLOT: Slot = Slot {
    generation: AtomicU32::new(0),
    in_use: AtomicBool::new(false),
    bytes: AtomicI64::new(0),
    peak: AtomicI64::new(0),
    limit: AtomicI64::new(i64::MAX),
};

static COUNTS: [Slot; SLOTS] = [FREE_SLOT; SLOTS];

/// What every counted statement holds together: statements running at once share
/// their backstop (as they share the `query_memory` pool), so that four at the edge of
/// their own limit do not hold four times it.
static TOTAL: AtomicI64 = AtomicI64::new(0);

/// Statements counted now.
static RUNNING: AtomicI64 = AtomicI64::new(0);

/// Whether [`StatementAllocator`] is the process's allocator (seen by its first use).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// What the allocator keeps per thread, in one thread-local so that a small block
/// costs one look-up of it (two had been a tenth of a planned statement's instructions).
struct Thread {
    /// The statement whose work this thread is doing: slot index + 1 in the low half,
    /// generation in the high half; 0 for none.
    current: Cell<u64>,
    /// The statement `small_sum` is for (its tag).
    small_tag: Cell<u64>,
    /// The small blocks allocated less freed on this thread for `small_tag`, not yet
    /// added to its count.
    small_sum: Cell<i64>,
}

thread_local! {
    static THREAD: Thread = const {
        Thread {
            current: Cell::new(0),
            small_tag: Cell::new(0),
            small_sum: Cell::new(0),
        }
    };
}

/// Counts a small block of `size` bytes (allocated, or freed when `freed`) against the
/// statement this thread is working for. Small blocks carry no header, so a block is
/// subtracted from the statement current when it is freed, not the one it was made
/// for: a sum that is only right on the whole. That is what it is for: memory a
/// statement's operators hold in millions of small pieces they do not report to the
/// pool — a window's value per partition, per-group state — which no header-counted
/// allocation shows. A block freed after its statement ended (a result's pieces) is
/// subtracted from nobody, or from a statement then running, which only ever holds
/// less for it.
#[inline(always)]
fn small(size: usize, freed: bool) {
    // During a thread's teardown the variable may be gone: nothing is counted then.
    let _ = THREAD.try_with(|t| {
        let tag = t.current.get();
        if tag != t.small_tag.get() {
            return small_switch(t, tag, size, freed);
        }
        if tag == 0 {
            return;
        }
        let sum = t.small_sum.get() + cost(size, freed);
        if sum.unsigned_abs() >= SMALL_FLUSH as u64 {
            count(tag, sum);
            t.small_sum.set(0);
        } else {
            t.small_sum.set(sum);
        }
    });
}

/// What a small block costs the process, not what was asked (negative when freed):
/// the system allocator gives each block a word of its own and rounds it to 16 bytes
/// (a 24-byte block takes 32); millions of small blocks are where that difference adds
/// up.
#[inline(always)]
fn cost(size: usize, freed: bool) -> i64 {
    let c = ((size as i64 + 8 + 15) & !15).max(32);
    if freed { -c } else { c }
}

/// [`small`] when the thread's statement is not the one its sum is for: that sum is
/// added to its own statement first.
#[cold]
#[inline(never)]
fn small_switch(t: &Thread, tag: u64, size: usize, freed: bool) {
    let (was, sum) = (t.small_tag.get(), t.small_sum.get());
    if was != 0 && sum != 0 {
        count(was, sum);
    }
    t.small_tag.set(tag);
    t.small_sum
        .set(if tag == 0 { 0 } else { cost(size, freed) });
}

/// The statement whose work this thread is doing now (0 for none), for plan nodes to
/// carry where their work goes on.
pub fn current_statement() -> u64 {
    current()
}

fn current() -> u64 {
    // During a thread's teardown the variable may be gone: nothing is counted then.
    THREAD.try_with(|t| t.current.get()).unwrap_or(0)
}

/// The slot `tag` names, while it still belongs to the statement the tag was made for.
fn slot(tag: u64) -> Option<&'static Slot> {
    let index = (tag & 0xffff_ffff) as usize;
    let s = COUNTS.get(index.checked_sub(1)?)?;
    (s.generation.load(Ordering::Relaxed) == (tag >> 32) as u32).then_some(s)
}

fn count(tag: u64, bytes: i64) {
    if let Some(s) = slot(tag) {
        let was = s.bytes.fetch_add(bytes, Ordering::SeqCst);
        TOTAL.fetch_add(bytes, Ordering::SeqCst);
        if bytes > 0 {
            s.peak
                .fetch_max(was.saturating_add(bytes), Ordering::Relaxed);
        }
        // The statement may have ended (and the slot been taken) between the check and
        // the count: the count is then taken back, so that the next statement never
        // carries bytes it cannot give back (a block's stale tag is not subtracted).
        if s.generation.load(Ordering::SeqCst) != (tag >> 32) as u32 {
            s.bytes.fetch_sub(bytes, Ordering::SeqCst);
            TOTAL.fetch_sub(bytes, Ordering::SeqCst);
        }
    }
}

/// The global allocator that counts what each running statement holds (see the module
/// documentation): the system allocator, with a small header on allocations of 4 KiB
/// and more. Install it in the program that links Tarn to make the `query_memory`
/// backstop hold for memory DataFusion does not report to its pool:
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: tarn_alloc::StatementAllocator = tarn_alloc::StatementAllocator;
/// # fn main() {}
/// ```
///
/// (`tarn::StatementAllocator` is the same type.) Tarn's CLI and REST host install it.
#[derive(Debug, Default, Clone, Copy)]
pub struct StatementAllocator;

impl StatementAllocator {
    /// The layout of a counted allocation of `layout`, with its header.
    fn with_header(layout: Layout) -> Option<(Layout, usize)> {
        let h = header(layout);
        let size = layout.size().checked_add(h)?;
        Some((Layout::from_size_align(size, h).ok()?, h))
    }

    /// An allocation of `layout` made by `make` (the system's plain or zeroed
    /// allocation), with a header and counted from [`SMALLEST_COUNTED`].
    unsafe fn allocate(layout: Layout, make: impl FnOnce(Layout) -> *mut u8) -> *mut u8 {
        if layout.size() < SMALLEST_COUNTED {
            let p = make(layout);
            if !p.is_null() {
                small(layout.size(), false);
            }
            return p;
        }
        INSTALLED.store(true, Ordering::Relaxed);
        let Some((outer, h)) = Self::with_header(layout) else {
            return std::ptr::null_mut();
        };
        unsafe { Self::tagged(make(outer), layout, h) }
    }

    /// Writes the current statement's tag in front of `base` (an allocation of
    /// `layout` with its header) and counts it; the user's pointer.
    unsafe fn tagged(base: *mut u8, layout: Layout, h: usize) -> *mut u8 {
        if base.is_null() {
            return base;
        }
        let tag = current();
        // SAFETY: `base` is aligned to at least 16 and has `h` >= 16 bytes before the
        // user's part.
        unsafe { (base as *mut u64).write(tag) };
        if tag != 0 {
            count(tag, layout.size() as i64);
        }
        unsafe { base.add(h) }
    }
}

// SAFETY: every method passes a valid layout to `System` and gives back pointers that
// `System` allocated, offset by the header that the same layout's size selects on the
// way back (a layout below `SMALLEST_COUNTED` has no header, one at or above it has).
unsafe impl GlobalAlloc for StatementAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `make` is given a valid, non-zero layout.
        unsafe { Self::allocate(layout, |l| System.alloc(l)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        unsafe { Self::allocate(layout, |l| System.alloc_zeroed(l)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() < SMALLEST_COUNTED {
            small(layout.size(), true);
            return unsafe { System.dealloc(ptr, layout) };
        }
        let h = header(layout);
        let base = unsafe { ptr.sub(h) };
        let tag = unsafe { (base as *const u64).read() };
        if tag != 0 {
            count(tag, -(layout.size() as i64));
        }
        // SAFETY: the layout `alloc` used for this size and alignment (it succeeded).
        let outer = unsafe { Layout::from_size_align_unchecked(layout.size() + h, h) };
        unsafe { System.dealloc(base, outer) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let was = layout.size() >= SMALLEST_COUNTED;
        let will = new_size >= SMALLEST_COUNTED;
        if !was && !will {
            let moved = unsafe { System.realloc(ptr, layout, new_size) };
            if !moved.is_null() {
                small(layout.size(), true);
                small(new_size, false);
            }
            return moved;
        }
        if was && will {
            // The block keeps its header, and so its statement.
            let h = header(layout);
            let base = unsafe { ptr.sub(h) };
            let tag = unsafe { (base as *const u64).read() };
            let outer = unsafe { Layout::from_size_align_unchecked(layout.size() + h, h) };
            // The new size with its header must still be a valid layout.
            let Some(new_outer) = new_size
                .checked_add(h)
                .filter(|n| Layout::from_size_align(*n, h).is_ok())
            else {
                return std::ptr::null_mut();
            };
            let moved = unsafe { System.realloc(base, outer, new_outer) };
            if moved.is_null() {
                return moved;
            }
            if tag != 0 {
                count(tag, new_size as i64 - layout.size() as i64);
            }
            return unsafe { moved.add(h) };
        }
        // Across the threshold: a new block with (or without) a header, and a copy.
        // SAFETY: the caller promises `new_size` with `layout`'s alignment is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// What one statement may hold, counted by the allocator, before it is stopped: its
/// `query_memory` and a quarter more (at least 64 MiB more). The margin is for what
/// the pool counts and the allocator counts again differently — an operator's estimate
/// of its own state, batches in flight between plan nodes — so that a sort or join
/// that would spill within `query_memory` still spills rather than fails.
pub fn backstop(query_memory: usize) -> usize {
    query_memory.saturating_add((query_memory / 4).max(64 << 20))
}

/// A running statement's count: taken when the statement starts, given back when it
/// ends (dropped).
#[derive(Debug)]
pub struct Meter {
    tag: u64,
}

impl Meter {
    /// A count for a statement that may hold `limit` bytes; uncounted (tag 0) when the
    /// allocator is not installed or every slot is taken.
    pub fn start(limit: usize) -> Meter {
        if !INSTALLED.load(Ordering::Relaxed) {
            return Meter { tag: 0 };
        }
        for (i, s) in COUNTS.iter().enumerate() {
            if s.in_use
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let generation = s.generation.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
                // (A count that raced the last statement's end is taken back here.)
                TOTAL.fetch_sub(s.bytes.swap(0, Ordering::SeqCst), Ordering::SeqCst);
                RUNNING.fetch_add(1, Ordering::SeqCst);
                s.peak.store(0, Ordering::Relaxed);
                s.limit
                    .store(i64::try_from(limit).unwrap_or(i64::MAX), Ordering::Relaxed);
                return Meter {
                    tag: (u64::from(generation) << 32) | (i as u64 + 1),
                };
            }
        }
        Meter { tag: 0 }
    }

    /// The statement's tag, for the plan nodes that do its work elsewhere.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// `fut`, counted against this statement while it is polled, and ended with
    /// `over(…)` at the first poll after the statement passed its backstop.
    pub fn run<F, T, E>(&self, fut: F, over: fn(Over) -> E) -> Counted<F, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        Counted {
            fut: Box::pin(fut),
            tag: self.tag,
            over,
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Some(s) = slot(self.tag) {
            let peak = s.peak.load(Ordering::Relaxed);
            // A new generation first, so the blocks this statement leaves behind are
            // not counted against the slot's next statement.
            s.generation.fetch_add(1, Ordering::AcqRel);
            TOTAL.fetch_sub(s.bytes.swap(0, Ordering::SeqCst), Ordering::SeqCst);
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            s.in_use.store(false, Ordering::Release);
            if peak >= TRIM_AFTER {
                trim_when_idle();
            }
        }
    }
}

/// A statement that held this much has the memory it freed handed back to the system
/// once no such statement has ended for [`TRIM_IDLE`] (see [`release_free_memory`]).
const TRIM_AFTER: i64 = 64 << 20;

/// How long after the last large statement the freed memory is handed back: a run of
/// large statements back to back reuses it instead (handing it back costs each of
/// them its page faults again).
const TRIM_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// When the last large statement ended, in milliseconds since [`trim_clock`]'s start;
/// 0 when nothing waits to be handed back.
static TRIM_DUE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn trim_clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Asks for the memory freed by a large result a host let go of (its rows as JSON, its
/// body, which are made after the statement's own work ended) to be handed back to the
/// system once large statements pause, as it is after a large statement (see
/// `release_free_memory`): an idle host stayed at 1.9 GB after a 400 for a result
/// too large, whose rows were built and freed after its statement.
pub fn release_soon() {
    trim_when_idle();
}

/// Whether a result of `bytes` is large enough for [`release_soon`].
pub fn worth_releasing(bytes: usize) -> bool {
    bytes as i64 >= TRIM_AFTER
}

/// Asks for the freed memory to be handed back once large statements pause, by a
/// thread started at the first such request.
fn trim_when_idle() {
    static TRIMMER: std::sync::Once = std::sync::Once::new();
    TRIM_DUE.store(trim_clock(), Ordering::Release);
    TRIMMER.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("tarn-trim".into())
            .spawn(|| {
                let idle = u64::try_from(TRIM_IDLE.as_millis()).unwrap_or(u64::MAX);
                loop {
                    std::thread::sleep(TRIM_IDLE / 2);
                    let due = TRIM_DUE.load(Ordering::Acquire);
                    if due != 0
                        && trim_clock().saturating_sub(due) >= idle
                        && TRIM_DUE
                            .compare_exchange(due, 0, Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok()
                    {
                        release_free_memory();
                    }
                }
            });
    });
}

/// Gives the pages the system allocator keeps free back to the system. glibc keeps what
/// a statement freed in its arenas (blocks under its mmap threshold, which rises to
/// 32 MiB as large blocks are freed): an idle server stayed at 2–5.6 GB after one heavy
/// statement, and the next statement's memory stacked on top of it. A no-op where the
/// allocator is not glibc's.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim takes no pointers and only returns free pages of the
        // allocator's own arenas to the system; any thread may call it at any time.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Makes statement `tag` the current one on this thread until dropped (the one before
/// it again after).
pub struct Entered {
    before: u64,
}

/// Makes statement `tag` the current one on this thread and leaves it so: for a plan
/// node's stream, whose task (one DataFusion spawned, a repartition's or a merge's) goes
/// on after the poll with work of the same statement — partitioning the batch it got,
/// sending it on. That task's next poll of any plan node names its statement again, so
/// a tag left behind is another statement's only for the little work a task does
/// before it polls its input; a tag left for a statement that has ended counts nothing.
pub fn set_current(tag: u64) {
    let _ = THREAD.try_with(|t| t.current.set(tag));
}

/// Enters statement `tag` (see [`Entered`]).
pub fn enter(tag: u64) -> Entered {
    let before = THREAD.try_with(|t| t.current.replace(tag)).unwrap_or(0);
    Entered { before }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = THREAD.try_with(|t| t.current.set(self.before));
    }
}

/// A statement past its backstop: what it holds and may hold, and, when it is ended
/// for what the statements running with it hold together, their total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over {
    /// What the statement holds.
    pub held: u64,
    /// What one statement, and all running at once together, may hold.
    pub limit: u64,
    /// What the running statements hold together, when that is what is past the limit.
    pub together: Option<u64>,
}

impl std::fmt::Display for Over {
    /// The words of the backstop's error (after "query memory limit (query_memory)
    /// exceeded: ").
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Over {
            held,
            limit,
            together,
        } = *self;
        match together {
            None => write!(
                f,
                "this statement holds {held} bytes, past the {limit} bytes a statement may \
                 hold (query_memory and a quarter more)"
            ),
            Some(total) => write!(
                f,
                "the statements running at once hold {total} bytes together (this one \
                 {held}), past the {limit} bytes they may hold together (query_memory and \
                 a quarter more); run it again when fewer run"
            ),
        }
    }
}

/// Whether statement `tag` is past its backstop: it holds more than its limit, or the
/// running statements together hold more than it and this one more than its share of
/// it (so the largest holders end, and a small statement beside them goes on).
pub fn over(tag: u64) -> Option<Over> {
    let s = slot(tag)?;
    let bytes = s.bytes.load(Ordering::Relaxed);
    let limit = s.limit.load(Ordering::Relaxed);
    if bytes > limit {
        return Some(Over {
            held: bytes as u64,
            limit: limit as u64,
            together: None,
        });
    }
    let total = TOTAL.load(Ordering::Relaxed);
    let running = RUNNING.load(Ordering::Relaxed).max(1);
    (total > limit && bytes > limit / running).then_some(Over {
        held: bytes.max(0) as u64,
        limit: limit as u64,
        together: Some(total as u64),
    })
}

/// A future counted against a statement (see [`Meter::run`]).
pub struct Counted<F, E> {
    fut: Pin<Box<F>>,
    tag: u64,
    over: fn(Over) -> E,
}

impl<F, T, E> Future for Counted<F, E>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        set_current(this.tag);
        let polled = this.fut.as_mut().poll(cx);
        // No statement after the poll: what the thread does next (another statement's
        // commit, the encoding of its answer) is not this one's, nor one whose plan
        // node it polled last.
        set_current(0);
        match (polled, over(this.tag)) {
            (Poll::Ready(r), _) => Poll::Ready(r),
            (_, Some(o)) => Poll::Ready(Err((this.over)(o))),
            (polled, None) => polled,
        }
    }
}

/// A future none of whose work is a statement's (see [`uncounted`]).
pub struct Uncounted<F> {
    fut: Pin<Box<F>>,
}

/// `fut` with no statement current on its thread at the start and end of each poll:
/// for the work around statements (committing them, encoding their answers), which a
/// plan node's tag left on the thread (see [`set_current`]) would otherwise charge to
/// a statement that did not do it. Statements inside it count as before.
pub fn uncounted<F: Future>(fut: F) -> Uncounted<F> {
    Uncounted { fut: Box::pin(fut) }
}

impl<F: Future> Future for Uncounted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        set_current(0);
        let polled = this.fut.as_mut().poll(cx);
        set_current(0);
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: StatementAllocator = StatementAllocator;

    /// The counts are the process's: the tests take turns, so that one's blocks are
    /// never part of another's total.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(m: &Meter) -> i64 {
        slot(m.tag()).map_or(0, |s| s.bytes.load(Ordering::Relaxed))
    }

    #[test]
    fn a_statement_holds_what_it_allocated_until_it_is_freed_anywhere() {
        let _serial = serial();
        let _warm = vec![0u8; SMALLEST_COUNTED]; // the allocator is seen in use
        let m = Meter::start(10 << 20);
        assert_ne!(m.tag(), 0);
        let mut v: Vec<u8> = {
            let _in = enter(m.tag());
            let mut v = Vec::with_capacity(100); // small: not counted
            v.extend_from_slice(&[1; 100]);
            assert_eq!(held(&m), 0);
            v.reserve_exact(8_000 - v.len()); // across the threshold: counted
            assert!(held(&m) >= 8_000, "{}", held(&m));
            v.resize(4 << 20, 7); // grown in place or moved, still counted
            v
        };
        assert!(held(&m) >= 4 << 20);
        assert!(over(m.tag()).is_none());
        assert_eq!((v[0], v[99], v[100], v[(4 << 20) - 1]), (1, 1, 7, 7));
        // Another allocation of the statement, made past its limit.
        let big = {
            let _in = enter(m.tag());
            vec![0u8; 8 << 20]
        };
        let o = over(m.tag()).expect("past the limit");
        assert!(o.held > o.limit && o.limit == 10 << 20 && o.together.is_none());
        // Freed on another thread that is doing no statement's work: still its own.
        std::thread::spawn(move || drop(big))
            .join()
            .expect("joined");
        assert!(over(m.tag()).is_none());
        v.truncate(10);
        v.shrink_to_fit(); // back under the threshold: no longer counted
        assert_eq!(held(&m), 0);
        assert_eq!(v, vec![1; 10]);
    }

    #[test]
    fn statements_running_at_once_share_their_backstop() {
        let _serial = serial();
        let _warm = vec![0u8; SMALLEST_COUNTED];
        let (a, b, small) = (
            Meter::start(10 << 20),
            Meter::start(10 << 20),
            Meter::start(10 << 20),
        );
        let hold = |m: &Meter, n: usize| {
            let _in = enter(m.tag());
            vec![1u8; n]
        };
        let x = hold(&a, 4 << 20);
        let y = hold(&b, 4 << 20);
        let z = hold(&small, 1 << 20);
        // 9 MiB together: within the limit.
        assert!(over(a.tag()).is_none() && over(small.tag()).is_none());
        let y2 = hold(&b, 2 << 20);
        // 11 MiB together, each under 10: the two that hold more than a third end, the
        // small one goes on.
        let o = over(a.tag()).expect("a holds more than its share");
        assert_eq!((o.held, o.together), (4 << 20, Some(11 << 20)));
        assert!(over(b.tag()).is_some_and(|o| o.held == 6 << 20));
        assert!(over(small.tag()).is_none());
        assert!(o.to_string().contains("together"), "{o}");
        drop((y, y2));
        drop(b);
        assert!(over(a.tag()).is_none());
        drop((x, z));
    }

    #[test]
    fn a_block_outliving_its_statement_is_not_the_next_ones() {
        let _serial = serial();
        let _warm = vec![0u8; SMALLEST_COUNTED];
        let first = Meter::start(1 << 30);
        let kept = {
            let _in = enter(first.tag());
            vec![0u8; 1 << 20]
        };
        let tag = first.tag();
        drop(first);
        let next = Meter::start(1 << 30);
        drop(kept); // perhaps in the same slot: the generation tells them apart
        assert_eq!(held(&next), 0);
        assert!(slot(tag).is_none());
        // Large alignments keep their alignment behind the header.
        let layout = Layout::from_size_align(1 << 16, 4096).expect("layout");
        let _in = enter(next.tag());
        // SAFETY: a valid, non-zero layout, freed with the same layout.
        unsafe {
            let p = ALLOCATOR.alloc(layout);
            assert!(!p.is_null() && (p as usize).is_multiple_of(4096));
            assert_eq!(held(&next), 1 << 16);
            ALLOCATOR.dealloc(p, layout);
        }
        assert_eq!(held(&next), 0);
    }

    #[test]
    fn a_statement_holds_its_small_blocks_on_the_whole() {
        let _serial = serial();
        let _warm = vec![0u8; SMALLEST_COUNTED];
        let m = Meter::start(1 << 30);
        let blocks: Vec<Box<[u8; 48]>> = {
            let _in = enter(m.tag());
            (0..100_000).map(|_| Box::new([1u8; 48])).collect()
        };
        // 100,000 blocks of 48 bytes (and the vector of their pointers, counted whole).
        let held_then = held(&m);
        assert!(held_then >= 4_800_000 - SMALL_FLUSH, "{held_then}");
        {
            let _in = enter(m.tag());
            drop(blocks);
        }
        assert!(held(&m) < SMALL_FLUSH, "{}", held(&m));
        // Freed by a thread doing no statement's work, nothing is subtracted: the count
        // errs towards holding more, never less.
        let again: Vec<Box<[u8; 48]>> = {
            let _in = enter(m.tag());
            (0..10_000).map(|_| Box::new([1u8; 48])).collect()
        };
        let before = held(&m);
        std::thread::spawn(move || drop(again))
            .join()
            .expect("joined");
        assert!(
            held(&m) >= before - (10_000 * 8 + 64),
            "{} {before}",
            held(&m)
        );
    }

    #[test]
    fn set_current_stays_until_replaced_and_enter_restores() {
        let _serial = serial();
        set_current(0);
        {
            let _a = enter(5);
            assert_eq!(current_statement(), 5);
            set_current(6);
        }
        assert_eq!(current_statement(), 0);
        set_current(7);
        assert_eq!(current_statement(), 7);
        set_current(0);
    }
}
