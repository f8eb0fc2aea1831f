//! The ready queue of one worker: released jobs ordered earliest deadline
//! first, in storage preallocated when the worker is built.
//!
//! It owns the ordering (deadline, then release, then task, then job number,
//! so equal deadlines run in release order and ties are deterministic). It
//! must never grow: a push beyond the capacity is refused, never reallocated.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A released job waiting for the worker. Times are `CLOCK_MONOTONIC` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Job {
    pub deadline_ns: u64,
    pub release_ns: u64,
    /// The task's index among its worker's tasks.
    pub task: usize,
    /// The job's number within its task, from 0.
    pub seq: u64,
}

/// A fixed-capacity min-heap of jobs by deadline.
pub(crate) struct ReadyQueue {
    heap: BinaryHeap<Reverse<Job>>,
    capacity: usize,
}

impl ReadyQueue {
    pub fn with_capacity(capacity: usize) -> ReadyQueue {
        ReadyQueue {
            heap: BinaryHeap::with_capacity(capacity),
            capacity,
        }
    }

    /// Queues `job`, or gives it back when the queue is full (the heap is
    /// never allowed to reallocate on the real-time path).
    pub fn push(&mut self, job: Job) -> Result<(), Job> {
        if self.heap.len() >= self.capacity {
            return Err(job);
        }
        self.heap.push(Reverse(job));
        Ok(())
    }

    /// The job with the earliest deadline.
    pub fn pop(&mut self) -> Option<Job> {
        self.heap.pop().map(|Reverse(job)| job)
    }

    /// Takes the earliest job if its deadline is at or before `now_ns`: such
    /// a job can no longer finish in time.
    pub fn pop_expired(&mut self, now_ns: u64) -> Option<Job> {
        let Reverse(top) = self.heap.peek()?;
        if top.deadline_ns > now_ns {
            return None;
        }
        self.pop()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(deadline_ns: u64, release_ns: u64, task: usize) -> Job {
        Job {
            deadline_ns,
            release_ns,
            task,
            seq: 0,
        }
    }

    #[test]
    fn jobs_leave_earliest_deadline_first() {
        let mut q = ReadyQueue::with_capacity(4);
        for j in [job(30, 0, 0), job(10, 5, 1), job(20, 1, 2), job(10, 2, 3)] {
            q.push(j).unwrap();
        }
        let order: Vec<usize> = std::iter::from_fn(|| q.pop()).map(|j| j.task).collect();
        assert_eq!(
            order,
            vec![3, 1, 2, 0],
            "equal deadlines: earlier release first"
        );
    }

    #[test]
    fn a_full_queue_refuses_instead_of_growing() {
        let mut q = ReadyQueue::with_capacity(1);
        q.push(job(1, 0, 0)).unwrap();
        assert_eq!(q.push(job(2, 0, 1)), Err(job(2, 0, 1)));
        assert_eq!(q.heap.capacity(), 1);
    }

    #[test]
    fn only_expired_jobs_are_taken_as_expired() {
        let mut q = ReadyQueue::with_capacity(3);
        q.push(job(10, 0, 0)).unwrap();
        q.push(job(20, 0, 1)).unwrap();
        assert_eq!(q.pop_expired(9), None);
        assert_eq!(q.pop_expired(10).map(|j| j.task), Some(0));
        assert_eq!(q.pop_expired(10), None);
        assert!(!q.is_empty());
    }
}
