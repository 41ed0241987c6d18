//! 4096-aligned, pre-faulted byte buffers (FORMATS.md §6; ENGINE.md §4).
//!
//! Direct reads need a 4096-aligned destination, and on a 2-core machine a read only overlaps
//! compute if the reading thread sleeps in the kernel for the whole transfer: a first-touch page
//! fault inside `pread` would make the kernel allocate and zero pages on the reader's time. So
//! every buffer is an anonymous mapping whose pages are all faulted in when it is allocated,
//! never during a read. Resident memory then equals what the engine planned, from the start.

use crate::error::{Error, Result};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every direct-I/O buffer, offset and length (FORMATS.md §6), in bytes.
pub const ALIGN: usize = 4096;

/// Rounds `n` up to a multiple of [`ALIGN`], or `None` on overflow.
pub fn align_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|v| v & !(ALIGN - 1))
}

/// A zero-initialised byte buffer at a 4096-aligned address whose pages are all resident.
///
/// Owned like a `Vec<u8>` (it is `Send` and `Sync`, dereferences to `[u8]`); freed on drop.
/// The length is exactly what was asked for; the mapping behind it is rounded up to whole pages.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: AlignedBuf owns its mapping exclusively (like Vec<u8>); shared access only hands out
// `&[u8]` and mutation requires `&mut self`, so moving it or sharing `&AlignedBuf` across threads
// is as safe as for Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: see the Send impl: `&AlignedBuf` only gives read access.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` bytes (zeroed) at a 4096-aligned address and faults every page in now.
    ///
    /// Errors: exit 3 (`Error::resources`) naming the size when the system refuses the memory.
    /// A zero length is allowed (one page is mapped, the slice is empty).
    pub fn new(len: usize) -> Result<AlignedBuf> {
        let map_len = align_up(len.max(1)).ok_or_else(|| {
            Error::resources(format!("cannot allocate an aligned buffer of {len} bytes"))
        })?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let flags = libc::MAP_PRIVATE | libc::MAP_ANON;
        // SAFETY: an anonymous private mapping with no address hint and no file touches no
        // existing memory; the result is checked against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(Error::resources(format!(
                "cannot allocate {len} bytes of aligned memory ({e}); lower the memory budget"
            )));
        }
        // mmap returns page-aligned addresses; pages are at least 4096 bytes on every target.
        debug_assert_eq!(p as usize % ALIGN, 0);
        let ptr = NonNull::new(p as *mut u8).expect("mmap returned null without MAP_FAILED");
        let buf = AlignedBuf { ptr, len, map_len };
        buf.prefault();
        Ok(buf)
    }

    /// Writes one byte per 4096 bytes so that every page is present even where MAP_POPULATE
    /// is unavailable or was cut short under memory pressure (it does not report that).
    fn prefault(&self) {
        let base = self.ptr.as_ptr();
        let mut off = 0;
        while off < self.map_len {
            // SAFETY: off < map_len, inside our own writable mapping; volatile so the store is
            // not elided (the page is zero already, so the value does not change).
            unsafe { std::ptr::write_volatile(base.add(off), 0) };
            off += ALIGN;
        }
    }

    /// Length in bytes (as requested, not rounded).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to map_len >= len initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(target_endian = "big")]
compile_error!(
    "k3 reads BF16 weights as little-endian u16 in place: big-endian targets are not supported"
);

impl AlignedBuf {
    /// The `n` little-endian `u16` values starting at byte `byte_off` (which must be even:
    /// the buffer is 4096-aligned, so the values are then aligned), for BF16 weights read
    /// straight into the buffer. `None` if `byte_off` is odd or the range is out of bounds.
    pub fn u16s(&self, byte_off: usize, n: usize) -> Option<&[u16]> {
        let end = n.checked_mul(2)?.checked_add(byte_off)?;
        if byte_off % 2 != 0 || end > self.len {
            return None;
        }
        // SAFETY: the range [byte_off, end) lies inside the mapping's initialised bytes (checked
        // above); the base is 4096-aligned and byte_off even, so the pointer is aligned for u16;
        // every bit pattern is a valid u16; the borrow of `self` keeps the mapping alive and
        // immutable for the slice's lifetime. Little-endian targets only (compile_error above),
        // so the values equal u16::from_le_bytes of the file bytes.
        Some(unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().add(byte_off) as *const u16, n)
        })
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/map_len are exactly the mapping created in `new`, unmapped once here.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.map_len);
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        for len in [0usize, 1, 4095, 4096, 4097, 3 * 4096 + 17] {
            let mut b = AlignedBuf::new(len).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            for (i, x) in b.iter_mut().enumerate() {
                *x = i as u8;
            }
            assert!(b.iter().enumerate().all(|(i, &x)| x == i as u8));
        }
    }

    #[test]
    fn u16_views_are_little_endian_and_checked() {
        let mut b = AlignedBuf::new(10).unwrap();
        b[2..6].copy_from_slice(&[0x34, 0x12, 0xcd, 0xab]);
        assert_eq!(b.u16s(2, 2).unwrap(), &[0x1234, 0xabcd]);
        assert!(b.u16s(1, 1).is_none());
        assert!(b.u16s(8, 2).is_none());
        assert_eq!(b.u16s(10, 0).unwrap().len(), 0);
    }

    #[test]
    fn align_up_rounds_and_detects_overflow() {
        assert_eq!(align_up(0), Some(0));
        assert_eq!(align_up(1), Some(4096));
        assert_eq!(align_up(4096), Some(4096));
        assert_eq!(align_up(17_547_264 + 8192), Some(17_555_456));
        assert_eq!(align_up(usize::MAX), None);
    }
}
