//! Seeds and ids from the operating system.
//!
//! `rand`'s thread-local generator is not reseeded when a process forks, so every child
//! of one parent continues the parent's stream: data-loader workers that each opened a
//! [`crate::Reader`] drew the same batches, and buffers created in sibling processes
//! could get the same uuid. Everything that must differ between processes asks the OS.

use rand::{Rng, TryRng};

/// A `u64` from the operating system's entropy: different in every process, forked or not.
pub(crate) fn seed() -> u64 {
    rand::rngs::SysRng
        .try_next_u64()
        // getrandom does not fail on the kernels this crate runs on; if it ever did,
        // the thread's generator mixed with the pid still differs between processes.
        .unwrap_or_else(|_| rand::rng().next_u64() ^ u64::from(std::process::id()).rotate_left(32))
}

/// A fresh 16-byte id (a buffer's or a lane set's uuid).
pub(crate) fn uuid() -> [u8; 16] {
    let (a, b) = (seed(), seed());
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&a.to_le_bytes());
    id[8..].copy_from_slice(&b.to_le_bytes());
    id
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_and_ids_differ_between_calls() {
        assert_ne!(super::seed(), super::seed());
        assert_ne!(super::uuid(), super::uuid());
    }
}
