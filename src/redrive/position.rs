//! Where the consumer group may stand in each partition of the dead-letter
//! topic: before the first record read and not yet settled. A record is
//! settled once Kafka acknowledged what took its place: the event in its
//! original topic, or its copy back in the dead-letter topic. Records are
//! settled in any order; the position moves only over a settled prefix, so
//! a stop at any moment leaves nothing behind it unsent.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct Positions(BTreeMap<i32, Partition>);

#[derive(Debug)]
struct Partition {
    /// Read and not yet settled.
    unsettled: BTreeSet<i64>,
    /// After the last record read (or the start).
    next: i64,
    /// What was committed last.
    committed: i64,
}

impl Positions {
    /// A partition read from `start`, where the group stands now.
    pub fn start(&mut self, partition: i32, start: i64) {
        self.0.insert(
            partition,
            Partition {
                unsettled: BTreeSet::new(),
                next: start,
                committed: start,
            },
        );
    }

    pub fn read(&mut self, partition: i32, offset: i64) {
        if let Some(p) = self.0.get_mut(&partition) {
            p.unsettled.insert(offset);
            p.next = p.next.max(offset + 1);
        }
    }

    pub fn settled(&mut self, partition: i32, offset: i64) {
        if let Some(p) = self.0.get_mut(&partition) {
            p.unsettled.remove(&offset);
        }
    }

    /// Every offset before `end` was read (some may not exist: compaction,
    /// transaction markers).
    pub fn reached(&mut self, partition: i32, end: i64) {
        if let Some(p) = self.0.get_mut(&partition) {
            p.next = p.next.max(end);
        }
    }

    /// Positions that moved since the last call, to commit.
    pub fn moved(&mut self) -> Vec<(i32, i64)> {
        let mut moved = Vec::new();
        for (&partition, p) in &mut self.0 {
            let position = p.unsettled.first().copied().unwrap_or(p.next);
            if position > p.committed {
                p.committed = position;
                moved.push((partition, position));
            }
        }
        moved
    }

    /// Where each partition stands, as last committed.
    pub fn committed(&self) -> BTreeMap<i32, i64> {
        self.0.iter().map(|(&k, p)| (k, p.committed)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_moves_only_over_settled_records() {
        let mut p = Positions::default();
        p.start(0, 10);
        for offset in 10..14 {
            p.read(0, offset);
        }
        p.settled(0, 11);
        p.settled(0, 12);
        assert_eq!(p.moved(), vec![], "10 is not settled");
        p.settled(0, 10);
        assert_eq!(p.moved(), vec![(0, 13)]);
        assert_eq!(p.moved(), vec![], "only what moved");
        p.settled(0, 13);
        p.reached(0, 20);
        assert_eq!(p.moved(), vec![(0, 20)]);
        assert_eq!(p.committed()[&0], 20);
    }
}
