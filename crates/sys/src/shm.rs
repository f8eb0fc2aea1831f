//! Memory shared between processes: a sealed memfd (an anonymous file that
//! lives as long as a descriptor or a mapping of it) and its `MAP_SHARED`
//! mapping.
//!
//! It owns memfd_create, the seals, mmap and munmap. The mapping is reached
//! only through atomics (64- and 32-bit words, word- and byte-wise copies),
//! never through a plain reference or slice: another process writing the
//! same bytes at the same time can make what is read wrong, never undefined.
//! It must never decide who may touch which bytes when; that protocol is the
//! channel layer's.

use crate::error::{Error, ErrorKind, Result};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The seals a shared memory object must carry: a fixed size, so that no
/// process can shrink it under another's mapping (an access past the new
/// end would raise SIGBUS in the other process).
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// A memfd of a fixed size, sealed against resizing.
#[derive(Debug)]
pub struct SharedMemory {
    file: File,
    len: usize,
}

impl SharedMemory {
    /// A new memfd named `name` (shown in /proc/PID/fd as `memfd:NAME`) of
    /// `len` zero bytes, sealed against resizing and against further seals.
    pub fn create(name: &str, len: usize) -> Result<SharedMemory> {
        let action = format!("memfd_create({name:?}) of {len} bytes");
        let c_name = CString::new(name).map_err(|_| {
            Error::new(
                ErrorKind::Invalid,
                &action,
                "the name contains a NUL byte",
                "name it without NUL bytes",
            )
        })?;
        // SAFETY: `c_name` is NUL-terminated and outlives the call.
        let fd = unsafe {
            libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(Error::last_os(&action).with_fix(
                "use a name of at most 249 bytes, and raise the open-files limit \
                 (`ulimit -n`) if descriptors ran out",
            ));
        }
        // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64).map_err(|e| {
            Error::from_io(&action, &e)
                .with_fix("ask for less shared memory, or raise the memory limit of the cgroup")
        })?;
        // SAFETY: F_ADD_SEALS takes an int argument and no pointers.
        let rc = unsafe {
            libc::fcntl(
                file.as_raw_fd(),
                libc::F_ADD_SEALS,
                SIZE_SEALS | libc::F_SEAL_SEAL,
            )
        };
        if rc != 0 {
            return Err(Error::last_os(format!(
                "seal the size of {action} (F_ADD_SEALS)"
            )));
        }
        Ok(SharedMemory { file, len })
    }

    /// Takes a memfd received from another process. Refuses one whose size
    /// is not sealed: its sender could shrink it under our mapping.
    pub fn from_fd(fd: OwnedFd) -> Result<SharedMemory> {
        let action = "take a received memfd";
        // SAFETY: F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(Error::last_os(action)
                .with_fix("the peer must send a memfd created with sealing allowed"));
        }
        if seals & SIZE_SEALS != SIZE_SEALS {
            return Err(Error::new(
                ErrorKind::Invalid,
                action,
                "its size is not sealed: the sender could shrink it under our mapping",
                "create it with SharedMemory::create, which seals it",
            ));
        }
        let file = File::from(fd);
        let len = file
            .metadata()
            .map_err(|e| Error::from_io(action, &e))?
            .len();
        let len = usize::try_from(len).map_err(|_| {
            Error::new(
                ErrorKind::Invalid,
                action,
                format!("its {len} bytes exceed the address space"),
                "send a smaller memfd",
            )
        })?;
        Ok(SharedMemory { file, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maps the whole object shared and writable, its pages populated now
    /// (no page fault on first touch on a real-time path).
    pub fn map(&self) -> Result<SharedMapping> {
        let action = format!("mmap {} bytes of a memfd (MAP_SHARED)", self.len);
        if self.len == 0 {
            return Err(Error::new(
                ErrorKind::Invalid,
                action,
                "the memfd is empty",
                "create it with a size of at least one byte",
            ));
        }
        // SAFETY: a new mapping at an address the kernel chooses (NULL hint),
        // of our own descriptor; it aliases no Rust object.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                self.file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os(action).with_fix(
                "ask for less shared memory, or raise the address-space and \
                 memlock limits (`ulimit -v`, `ulimit -l`)",
            ));
        }
        let base = NonNull::new(base.cast::<u8>()).expect("mmap never succeeds at address 0");
        Ok(SharedMapping {
            base,
            len: self.len,
        })
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// A `MAP_SHARED` mapping of a [`SharedMemory`], unmapped on drop. It stays
/// valid after the memfd's descriptor is closed.
#[derive(Debug)]
pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory reached only through atomics (see the
// module doc), so moving the handle to, or sharing it with, another thread
// is as safe as sharing those atomics.
unsafe impl Send for SharedMapping {}
// SAFETY: as above.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 64-bit word at `offset`. Panics unless the offset is a multiple
    /// of 8 inside the mapping: offsets come from a layout, never from a peer.
    pub fn word_u64(&self, offset: usize) -> &AtomicU64 {
        let ptr = self.checked(offset, 8);
        // SAFETY: `checked` proved that the 8 bytes at `ptr` lie inside the
        // mapping and are 8-aligned (the mapping starts on a page); they stay
        // mapped while `self` is borrowed; this process accesses them only
        // atomically, with one size per word (module doc).
        unsafe { AtomicU64::from_ptr(ptr.cast()) }
    }

    /// The 32-bit word at `offset` (a multiple of 4 inside the mapping).
    pub fn word_u32(&self, offset: usize) -> &AtomicU32 {
        let ptr = self.checked(offset, 4);
        // SAFETY: as in `word_u64`, for 4 bytes.
        unsafe { AtomicU32::from_ptr(ptr.cast()) }
    }

    fn byte(&self, offset: usize) -> &AtomicU8 {
        let ptr = self.checked(offset, 1);
        // SAFETY: as in `word_u64`, for 1 byte.
        unsafe { AtomicU8::from_ptr(ptr) }
    }

    /// A pointer to `size` bytes at `offset`, after checking that they lie
    /// inside the mapping and are aligned to `size`.
    fn checked(&self, offset: usize, size: usize) -> *mut u8 {
        let inside = offset.checked_add(size).is_some_and(|end| end <= self.len);
        assert!(
            inside && offset.is_multiple_of(size),
            "offset {offset} is not an aligned {size}-byte unit inside the {}-byte mapping",
            self.len
        );
        self.base.as_ptr().wrapping_add(offset)
    }

    /// Copies `bytes` into the mapping at `offset` (Relaxed: the caller
    /// publishes them with a release store after).
    pub fn copy_in(&self, offset: usize, bytes: &[u8]) {
        for unit in self.units(offset, bytes.len()) {
            match unit {
                Unit::Byte(at) => self.byte(offset + at).store(bytes[at], Ordering::Relaxed),
                Unit::Word(at) => self
                    .word_u64(offset + at)
                    .store(read_word(&bytes[at..at + 8]), Ordering::Relaxed),
            }
        }
    }

    /// Copies `out.len()` bytes from the mapping at `offset` into `out`
    /// (Relaxed: the caller acquired them before).
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) {
        for unit in self.units(offset, out.len()) {
            match unit {
                Unit::Byte(at) => out[at] = self.byte(offset + at).load(Ordering::Relaxed),
                Unit::Word(at) => out[at..at + 8].copy_from_slice(
                    &self
                        .word_u64(offset + at)
                        .load(Ordering::Relaxed)
                        .to_ne_bytes(),
                ),
            }
        }
    }

    /// How a copy of `len` bytes at `offset` proceeds: single bytes up to
    /// the first 8-byte boundary, whole aligned words, then single bytes.
    /// Panics unless the range lies inside the mapping.
    fn units(&self, offset: usize, len: usize) -> impl Iterator<Item = Unit> {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        assert!(
            inside,
            "{len} bytes at offset {offset} are not inside the {}-byte mapping",
            self.len
        );
        let lead = offset.next_multiple_of(8).saturating_sub(offset).min(len);
        let body_end = lead + (len - lead) / 8 * 8;
        (0..lead)
            .map(Unit::Byte)
            .chain((lead..body_end).step_by(8).map(Unit::Word))
            .chain((body_end..len).map(Unit::Byte))
    }
}

/// One atomic access of a copy, at a position in the caller's buffer.
enum Unit {
    Byte(usize),
    Word(usize),
}

/// Eight bytes of a private buffer as a native-endian word.
fn read_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_ne_bytes(word)
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are exactly what mmap returned, and every
        // reference into the mapping borrows `self`, so none outlives it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_mapping_sees_the_first_ones_writes() {
        let memory = SharedMemory::create("tessera-test", 4096).unwrap();
        let (a, b) = (memory.map().unwrap(), memory.map().unwrap());
        a.word_u64(8).store(42, Ordering::Release);
        assert_eq!(b.word_u64(8).load(Ordering::Acquire), 42);
    }

    #[test]
    fn copies_round_trip_at_any_alignment() {
        let memory = SharedMemory::create("tessera-test", 64).unwrap();
        let mapping = memory.map().unwrap();
        let message: Vec<u8> = (1..=21).collect();
        for offset in 0..8 {
            mapping.copy_in(offset + 3, &message);
            let mut back = vec![0u8; message.len()];
            mapping.copy_out(offset + 3, &mut back);
            assert_eq!(back, message, "offset {}", offset + 3);
        }
    }

    #[test]
    #[should_panic(expected = "inside the 64-byte mapping")]
    fn a_copy_past_the_end_panics() {
        let memory = SharedMemory::create("tessera-test", 64).unwrap();
        memory.map().unwrap().copy_in(60, &[0; 8]);
    }

    #[test]
    fn a_received_memfd_keeps_its_size_and_seals() {
        let memory = SharedMemory::create("tessera-test", 100).unwrap();
        let fd = memory.as_fd().try_clone_to_owned().unwrap();
        assert_eq!(SharedMemory::from_fd(fd).unwrap().len(), 100);
    }

    #[test]
    fn an_unsealed_file_is_refused() {
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let err = SharedMemory::from_fd(file.into()).unwrap_err();
        assert!(err.fix.contains("sealing"), "{err}");
    }
}
