//! Large values made by sized calls and aggregates, held in the statements' memory
//! pool for as long as they live. A sized call checks its own batch; plan nodes that
//! run at once (the branches of a UNION ALL, the partitions of an aggregate) each
//! passed their own checks and together took 6 GB. Charged to the pool, they meet
//! the same `query_memory` as sorts, joins and aggregates' own state.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayData, ArrayRef, make_array};
use datafusion::arrow::buffer::Buffer;
use datafusion::common::Result;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};

/// Below this, a value is not worth a reservation (registering one takes a lock).
pub(crate) const SMALLEST_HELD: u64 = 1 << 20;

/// The engine's memory pool, shared by the functions that charge it. Two are equal
/// when they are the same pool (a function's identity must not change with it).
#[derive(Clone, Debug)]
pub(crate) struct SharedPool(pub(crate) Arc<dyn MemoryPool>);

impl PartialEq for SharedPool {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedPool {}

impl std::hash::Hash for SharedPool {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(state);
    }
}

impl SharedPool {
    /// A reservation of `bytes` for `what`, or the pool's "resources exhausted"
    /// error (a 400 naming `query_memory`).
    pub(crate) fn reserve(&self, what: &str, bytes: u64) -> Result<MemoryReservation> {
        let reservation = MemoryConsumer::new(what).register(&self.0);
        reservation.try_grow(usize::try_from(bytes).unwrap_or(usize::MAX))?;
        Ok(reservation)
    }

    /// A reservation for `what` grown or shrunk to `bytes`, made when first needed
    /// (at [`SMALLEST_HELD`]).
    pub(crate) fn resize(
        &self,
        held: &mut Option<MemoryReservation>,
        what: &str,
        bytes: u64,
    ) -> Result<()> {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        match held {
            Some(r) => r.try_resize(bytes)?,
            None if bytes as u64 >= SMALLEST_HELD => {
                *held = Some(self.reserve(what, bytes as u64)?);
            }
            None => {}
        }
        Ok(())
    }
}

/// A buffer of `array` with the reservation that pays for it. The reservation is
/// shared by all the array's buffers and freed with the last of them.
struct Owned {
    buffer: Buffer,
    _held: Arc<MemoryReservation>,
}

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_slice()
    }
}

/// `array`, its memory held in `reservation` until the last of its buffers is dropped
/// (however far downstream that is). No copy: each buffer is the same memory with the
/// reservation as its owner.
pub(crate) fn hold(array: ArrayRef, reservation: MemoryReservation) -> Result<ArrayRef> {
    let held = Arc::new(reservation);
    let data = with_owner(array.to_data(), &held)?;
    Ok(make_array(data))
}

fn with_owner(data: ArrayData, held: &Arc<MemoryReservation>) -> Result<ArrayData> {
    let buffers = data
        .buffers()
        .iter()
        .map(|b| {
            Buffer::from(bytes::Bytes::from_owner(Owned {
                buffer: b.clone(),
                _held: held.clone(),
            }))
        })
        .collect();
    let children = data
        .child_data()
        .iter()
        .map(|c| with_owner(c.clone(), held))
        .collect::<Result<Vec<_>>>()?;
    Ok(data
        .into_builder()
        .buffers(buffers)
        .child_data(children)
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, StringArray};
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    #[test]
    fn a_held_array_keeps_its_reservation_until_its_last_buffer_goes() {
        let pool = SharedPool(Arc::new(GreedyMemoryPool::new(10 << 20)));
        let array: ArrayRef = Arc::new(StringArray::from(vec![Some("abc"), None, Some("de")]));
        let reservation = pool.reserve("test", 4 << 20).unwrap();
        let held = hold(array.clone(), reservation).unwrap();
        assert_eq!(held.as_ref(), array.as_ref());
        assert_eq!(pool.0.reserved(), 4 << 20);
        // A slice shares the buffers: still held.
        let slice = held.slice(1, 2);
        drop(held);
        assert_eq!(pool.0.reserved(), 4 << 20);
        assert_eq!(slice.len(), 2);
        drop(slice);
        assert_eq!(pool.0.reserved(), 0);
        // Past the pool: refused before anything is made.
        let err = pool.reserve("test", 11 << 20).unwrap_err().to_string();
        assert!(err.contains("Resources exhausted"), "{err}");
    }
}
