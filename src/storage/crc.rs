//! The row checksum (CRC-32 IEEE, seeded; see `format::row::item_crc`) of bytes reached
//! through a raw pointer, at the speed a read that checks every row needs.
//!
//! A sample checks each row it copies, so the checksum runs once per sampled row: for a
//! 165-byte W1 row, `crc32fast` takes about 25 ns, a third of the whole sample's time
//! per row, because its folding loop carries one dependency through every 64 bytes and
//! starts at 128. A row's length is fixed by its layout, though, so the distance from
//! each 16-byte block to the end is known in advance: every block is multiplied
//! (carry-less) by its own precomputed power of x, all independently, and the products
//! are XORed onto the last block, which leaves one 16-byte remainder to reduce. Blocks
//! are taken in windows of `WINDOW` bytes (one constant per block position in a window)
//! and windows are chained by one multiply each, so a row of any length needs only
//! `WINDOW / 16` constants.
//!
//! The bytes may be changing under another process's writes (the caller's stamp check
//! decides whether the result counts), so they are loaded through the pointer and never
//! borrowed as a slice. Without PCLMULQDQ (or off x86_64), and for spans under 32 bytes,
//! they are copied out in chunks and hashed by `crc32fast`.
#![expect(
    unsafe_code,
    reason = "loads from mapped memory and the carry-less multiply intrinsics"
)]

/// Bytes of a window of blocks sharing one set of per-position constants.
const WINDOW: usize = 1024;
/// Blocks in a window.
const WINDOW_BLOCKS: usize = WINDOW / 16;
/// Bytes per private copy on the portable path.
const CHUNK: usize = 512;

/// The checksum routine for spans of one length (a layout's payload span).
///
/// ```
/// use replaystore::internal::storage::SpanCrc;
/// let row = vec![7u8; 165];
/// let crc = SpanCrc::new(row.len());
/// // SAFETY: `row` holds `crc.len()` bytes.
/// let got = unsafe { crc.crc_at(5, row.as_ptr()) };
/// let mut h = crc32fast::Hasher::new_with_initial(5);
/// h.update(&row);
/// assert_eq!(got, h.finalize());
/// ```
#[derive(Debug, Clone)]
pub struct SpanCrc {
    len: usize,
    folds: Option<Folds>,
}

/// One pair of block keys, loaded 32 bytes at a time by the wide loop: aligned so no
/// load straddles a cache line. (In a `Vec<[u64; 4]>`, aligned to 16 by malloc, half of
/// them did in some processes and not in others: sealed W2 samples, which checksum
/// 903 KB a batch, measured 5% apart between two builds doing the same instructions.)
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct PairKeys([u64; 4]);

const _: () = assert!(std::mem::size_of::<PairKeys>() == 32);

/// Four block keys, loaded 64 bytes at a time by the 512-bit loop, aligned to a cache
/// line as [`PairKeys`] is to half of one.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct QuadKeys([u64; 8]);

const _: () = assert!(std::mem::size_of::<QuadKeys>() == 64);

/// How many 16-byte blocks one carry-less multiply takes on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// PCLMULQDQ: one.
    One,
    /// VPCLMULQDQ on 256 bits (AVX2): two.
    Two,
    /// VPCLMULQDQ on 512 bits (AVX-512F): four.
    Four,
}

/// The constants of the carry-less path for one span length.
#[derive(Debug, Clone)]
struct Folds {
    /// Offset of the last 16 bytes, onto which every other block is folded.
    target: usize,
    /// Keeps the bytes of the first block that are not also in the second (little-endian
    /// lanes, as loaded).
    first_mask: [u64; 2],
    /// Folds the first block (at offset 0) onto the last.
    first_keys: [u64; 2],
    /// Blocks between the first and the last (at `target - 16 * j`, j = 1..=middle).
    middle: usize,
    /// Folds a block `16 * i` bytes before the end of its window, i = 1..=WINDOW_BLOCKS.
    block_keys: Vec<[u64; 2]>,
    /// `block_keys` in pairs for 32-byte loads: blocks 2p + 2 (the lower half) and
    /// 2p + 1 (the upper).
    pair_keys: Vec<PairKeys>,
    /// `block_keys` in fours for 64-byte loads: blocks 4q + 4 (the lowest lanes), 4q + 3,
    /// 4q + 2 and 4q + 1 (the highest).
    quad_keys: Vec<QuadKeys>,
    /// Folds a window's sum one window further.
    window_keys: [u64; 2],
    /// Blocks per multiply on this CPU: which loop `crc_at` runs.
    width: Width,
}

impl SpanCrc {
    /// The routine for spans of `len` bytes.
    pub fn new(len: usize) -> SpanCrc {
        SpanCrc {
            len,
            folds: (len >= 32 && has_clmul()).then(|| Folds::new(len)),
        }
    }

    /// The span length this routine hashes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// [`SpanCrc::crc_at`] over `bytes`, which must hold the span: the safe form, for
    /// the benches that hold the routine against the other candidates. `None` when
    /// `bytes` is shorter than the span.
    ///
    /// ```
    /// use replaystore::internal::storage::SpanCrc;
    /// let crc = SpanCrc::new(64);
    /// assert_eq!(crc.crc_of(5, &[7u8; 64]), Some(crc32fast_seeded(5, &[7u8; 64])));
    /// assert_eq!(crc.crc_of(5, &[7u8; 63]), None);
    /// # fn crc32fast_seeded(s: u32, b: &[u8]) -> u32 {
    /// #     let mut h = crc32fast::Hasher::new_with_initial(s);
    /// #     h.update(b);
    /// #     h.finalize()
    /// # }
    /// ```
    pub fn crc_of(&self, initial: u32, bytes: &[u8]) -> Option<u32> {
        // SAFETY: `bytes` holds at least `self.len` readable bytes.
        (bytes.len() >= self.len).then(|| unsafe { self.crc_at(initial, bytes.as_ptr()) })
    }

    /// CRC-32 of the span at `src` continuing from `initial`, as
    /// `crc32fast::Hasher::new_with_initial(initial)` would give for the same bytes.
    ///
    /// # Safety
    /// `src` must be valid for reads of `self.len()` bytes.
    #[inline]
    pub unsafe fn crc_at(&self, initial: u32, src: *const u8) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if let Some(f) = &self.folds {
            // SAFETY: `folds` exists only where `has_clmul` found the instructions, and
            // `width` names only forms `clmul_width` found; the caller vouches
            // for `len` readable bytes, which `Folds::new(len)` sized.
            return unsafe {
                match f.width {
                    Width::Four => folded_512(f, initial, src),
                    Width::Two => folded_wide(f, initial, src),
                    Width::One => folded(f, initial, src),
                }
            };
        }
        // SAFETY: as the caller vouched.
        unsafe { copied(initial, src, self.len) }
    }
}

/// Which of the routines this CPU runs for spans of 32 bytes or more (chosen at run
/// time, so a benchmark names it beside its figures).
///
/// ```
/// assert!(replaystore::kernels::row_check_path().starts_with("CRC-32"));
/// ```
pub fn row_check_path() -> &'static str {
    if !has_clmul() {
        return "CRC-32 by crc32fast over private copies (no carry-less multiply)";
    }
    match clmul_width() {
        Width::Four => "CRC-32 by carry-less multiply, 512 bits (VPCLMULQDQ, AVX-512)",
        Width::Two => "CRC-32 by carry-less multiply, 256 bits (VPCLMULQDQ, AVX2)",
        Width::One => "CRC-32 by carry-less multiply, 128 bits (PCLMULQDQ)",
    }
}

/// How many blocks this CPU multiplies carry-less per instruction.
fn clmul_width() -> Width {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("vpclmulqdq") && has!("avx512f") && has!("avx2") {
            return Width::Four;
        }
        if has!("vpclmulqdq") && has!("avx2") {
            return Width::Two;
        }
    }
    Width::One
}

/// Whether this CPU multiplies carry-less (checked once; the standard library caches it).
fn has_clmul() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The portable path: private copies of at most `CHUNK` bytes, hashed by `crc32fast`.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes.
unsafe fn copied(initial: u32, src: *const u8, len: usize) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(initial);
    let mut chunk = [0u8; CHUNK];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        // SAFETY: done + n <= len stays inside what the caller vouched for; the chunk is
        // this frame's own memory of CHUNK >= n bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), chunk.as_mut_ptr(), n) };
        h.update(chunk.get(..n).unwrap_or(&[]));
        done += n;
    }
    h.finalize()
}

/// The CRC-32 polynomial, with its x^32 term.
const POLY: u64 = 0x1_04C1_1DB7;
/// POLY bit-reflected over its 33 bits (the form carry-less products of reflected
/// data divide by).
const POLY_REFLECTED: u64 = 0x1_DB71_0641;
/// floor(x^64 / POLY), bit-reflected over 33 bits: Barrett's reciprocal.
const MU: u64 = 0x1_F701_1641;

/// a * b mod POLY, for polynomials of degree < 32 (bit k the coefficient of x^k).
const fn mul_mod(a: u64, b: u64) -> u64 {
    let mut p = 0u64;
    let mut k = 0;
    while k < 32 {
        if b >> k & 1 == 1 {
            p ^= a << k;
        }
        k += 1;
    }
    let mut k = 63;
    while k >= 32 {
        if p >> k & 1 == 1 {
            p ^= POLY << (k - 32);
        }
        k -= 1;
    }
    p
}

/// x^e mod POLY, by square-and-multiply.
const fn x_pow_mod(e: u64) -> u64 {
    let (mut result, mut base, mut e) = (1u64, 2u64, e);
    while e > 0 {
        if e & 1 == 1 {
            result = mul_mod(result, base);
        }
        base = mul_mod(base, base);
        e >>= 1;
    }
    result
}

/// The multiplier that moves a 64-bit lane of bit-reflected data `e - 32` bits toward
/// the end of the message: x^e mod POLY, bit-reflected and shifted left by one (the
/// product of two reflected operands comes out one bit short). The constants of the
/// published folding method are these: x^160 and x^96 fold a 16-byte block by 16 bytes.
const fn key(e: u64) -> u64 {
    ((x_pow_mod(e) as u32).reverse_bits() as u64) << 1
}

/// The lane multipliers that fold a 16-byte block onto one `bits` bits further on: its
/// low lane (first in the message) moves `bits`, its high lane 64 fewer.
fn keys(bits: u64) -> [u64; 2] {
    [key(bits + 32), key(bits - 32)]
}

impl Folds {
    fn new(len: usize) -> Folds {
        let target = len - 16;
        // Blocks end-aligned on the target: 16-byte blocks at target - 16j, and the
        // first, at offset 0, keeps only the bytes before the nearest of them.
        let blocks = target.div_ceil(16);
        let first_len = target - 16 * (blocks - 1);
        let bytes_mask = |n: usize| match n {
            0 => 0,
            1..=7 => u64::MAX >> (64 - 8 * n),
            _ => u64::MAX,
        };
        let first_mask = [
            bytes_mask(first_len),
            bytes_mask(first_len.saturating_sub(8)),
        ];
        let block_keys: Vec<[u64; 2]> = (1..=WINDOW_BLOCKS as u64).map(|i| keys(128 * i)).collect();
        let pair_keys = block_keys
            .chunks_exact(2)
            .map(|p| match p {
                [near, far] => PairKeys([far[0], far[1], near[0], near[1]]),
                _ => PairKeys([0; 4]),
            })
            .collect();
        let quad_keys = block_keys
            .chunks_exact(4)
            .map(|q| match q {
                [a, b, c, d] => QuadKeys([d[0], d[1], c[0], c[1], b[0], b[1], a[0], a[1]]),
                _ => QuadKeys([0; 8]),
            })
            .collect();
        Folds {
            target,
            first_mask,
            first_keys: keys(8 * target as u64),
            middle: blocks - 1,
            block_keys,
            pair_keys,
            quad_keys,
            window_keys: keys(8 * WINDOW as u64),
            width: clmul_width(),
        }
    }
}

/// The carry-less path (see the module comment).
///
/// # Safety
/// `src` must be valid for reads of `f.target + 16` bytes. (The CPU must have
/// PCLMULQDQ, as the attribute says.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
unsafe fn folded(f: &Folds, initial: u32, src: *const u8) -> u32 {
    use std::arch::x86_64::{_mm_setzero_si128, _mm_xor_si128};
    // SAFETY: as the caller vouched.
    let mut acc = unsafe { ends(f, initial, src) };
    // Windows from the farthest to the nearest, each window's blocks folded onto its
    // end independently, and the running sum moved one window on before each is added.
    let window = keys16(&f.window_keys);
    let mut sum = _mm_setzero_si128();
    for w in (0..f.middle.div_ceil(WINDOW_BLOCKS)).rev() {
        let base = w * WINDOW_BLOCKS;
        let count = (f.middle - base).min(WINDOW_BLOCKS);
        let mut part = _mm_setzero_si128();
        for (i, k) in f.block_keys.iter().take(count).enumerate() {
            // SAFETY: block j = base + i + 1 <= middle starts at target - 16j >= 1 and
            // ends at most at target: inside the span.
            let block = unsafe { load16(src.add(f.target - 16 * (base + i + 1))) };
            part = _mm_xor_si128(part, fold(block, keys16(k)));
        }
        sum = _mm_xor_si128(fold(sum, window), part);
    }
    acc = _mm_xor_si128(acc, sum);
    reduce(acc)
}

/// [`folded`] with two blocks per multiply: the same sums, in half the instructions.
///
/// # Safety
/// `src` must be valid for reads of `f.target + 16` bytes. (The CPU must have the
/// features the attribute names.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,vpclmulqdq,avx2")]
unsafe fn folded_wide(f: &Folds, initial: u32, src: *const u8) -> u32 {
    use std::arch::x86_64::{
        __m256i, _mm_setzero_si128, _mm_xor_si128, _mm256_castsi256_si128,
        _mm256_clmulepi64_epi128, _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_set_epi64x,
        _mm256_setzero_si256, _mm256_xor_si256,
    };
    // SAFETY: as the caller vouched.
    let mut acc = unsafe { ends(f, initial, src) };
    let window = keys16(&f.window_keys);
    let mut sum = _mm_setzero_si128();
    for w in (0..f.middle.div_ceil(WINDOW_BLOCKS)).rev() {
        let base = w * WINDOW_BLOCKS;
        let count = (f.middle - base).min(WINDOW_BLOCKS);
        let mut pairs = _mm256_setzero_si256();
        for (p, PairKeys(k)) in f.pair_keys.iter().take(count / 2).enumerate() {
            // SAFETY: blocks j + 1 and j (j = base + 2p + 1, j + 1 <= middle) are the 32
            // bytes from target - 16(j + 1) >= 1, inside the span.
            let x = unsafe {
                _mm256_loadu_si256(
                    src.add(f.target - 16 * (base + 2 * p + 2))
                        .cast::<__m256i>(),
                )
            };
            let k = _mm256_set_epi64x(k[3] as i64, k[2] as i64, k[1] as i64, k[0] as i64);
            let x = _mm256_xor_si256(
                _mm256_clmulepi64_epi128::<0x00>(x, k),
                _mm256_clmulepi64_epi128::<0x11>(x, k),
            );
            pairs = _mm256_xor_si256(pairs, x);
        }
        let mut part = _mm_xor_si128(
            _mm256_castsi256_si128(pairs),
            _mm256_extracti128_si256::<1>(pairs),
        );
        if count % 2 == 1
            && let Some(k) = f.block_keys.get(count - 1)
        {
            // SAFETY: block base + count <= middle, inside the span as in `folded`.
            let block = unsafe { load16(src.add(f.target - 16 * (base + count))) };
            part = _mm_xor_si128(part, fold(block, keys16(k)));
        }
        sum = _mm_xor_si128(fold(sum, window), part);
    }
    acc = _mm_xor_si128(acc, sum);
    reduce(acc)
}

/// [`folded`] with four blocks per multiply (VPCLMULQDQ on 512 bits): the same sums.
/// A sealed W2 row (28 KB) is checked at each draw, so this loop's throughput is a
/// share of every checked Atari sample.
///
/// # Safety
/// `src` must be valid for reads of `f.target + 16` bytes. (The CPU must have the
/// features the attribute names.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,vpclmulqdq,avx512f")]
unsafe fn folded_512(f: &Folds, initial: u32, src: *const u8) -> u32 {
    use std::arch::x86_64::{
        __m512i, _mm_setzero_si128, _mm_xor_si128, _mm512_castsi512_si128,
        _mm512_clmulepi64_epi128, _mm512_extracti32x4_epi32, _mm512_load_si512, _mm512_loadu_si512,
        _mm512_setzero_si512, _mm512_xor_si512,
    };
    // SAFETY: as the caller vouched.
    let mut acc = unsafe { ends(f, initial, src) };
    let window = keys16(&f.window_keys);
    let mut sum = _mm_setzero_si128();
    for w in (0..f.middle.div_ceil(WINDOW_BLOCKS)).rev() {
        let base = w * WINDOW_BLOCKS;
        let count = (f.middle - base).min(WINDOW_BLOCKS);
        let mut quads = _mm512_setzero_si512();
        for (q, keys) in f.quad_keys.iter().take(count / 4).enumerate() {
            // SAFETY: blocks j + 3 .. j (j = base + 4q + 1, j + 3 <= middle) are the 64
            // bytes from target - 16(j + 3) >= 1, inside the span; `keys` is a
            // 64-byte-aligned QuadKeys.
            let (x, k) = unsafe {
                (
                    _mm512_loadu_si512(
                        src.add(f.target - 16 * (base + 4 * q + 4))
                            .cast::<__m512i>(),
                    ),
                    _mm512_load_si512(std::ptr::from_ref(keys).cast::<__m512i>()),
                )
            };
            let x = _mm512_xor_si512(
                _mm512_clmulepi64_epi128::<0x00>(x, k),
                _mm512_clmulepi64_epi128::<0x11>(x, k),
            );
            quads = _mm512_xor_si512(quads, x);
        }
        let mut part = _mm_xor_si128(
            _mm_xor_si128(
                _mm512_castsi512_si128(quads),
                _mm512_extracti32x4_epi32::<1>(quads),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(quads),
                _mm512_extracti32x4_epi32::<3>(quads),
            ),
        );
        // The window's last blocks (fewer than four), one at a time.
        for i in (count / 4 * 4)..count {
            if let Some(k) = f.block_keys.get(i) {
                // SAFETY: block base + i + 1 <= middle, inside the span as in `folded`.
                let block = unsafe { load16(src.add(f.target - 16 * (base + i + 1))) };
                part = _mm_xor_si128(part, fold(block, keys16(k)));
            }
        }
        sum = _mm_xor_si128(fold(sum, window), part);
    }
    acc = _mm_xor_si128(acc, sum);
    reduce(acc)
}

/// The 16 bytes at `p`.
///
/// # Safety
/// `p` must be valid for reads of 16 bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load16(p: *const u8) -> std::arch::x86_64::__m128i {
    // SAFETY: as the caller vouched; an unaligned load of plain bytes (SSE2, part of
    // the x86_64 baseline).
    unsafe { std::arch::x86_64::_mm_loadu_si128(p.cast()) }
}

/// Lane multipliers as a register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
fn keys16(k: &[u64; 2]) -> std::arch::x86_64::__m128i {
    std::arch::x86_64::_mm_set_epi64x(k[1] as i64, k[0] as i64)
}

/// The last block with the first folded onto it. The first, loaded from offset 0, keeps
/// only its bytes before the nearest middle block, and takes the initial value: a CRC
/// started from a register value is one started from zero with that value XORed into
/// the first four bytes (the register starts at !initial).
///
/// # Safety
/// `src` must be valid for reads of `f.target + 16` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
unsafe fn ends(f: &Folds, initial: u32, src: *const u8) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::{_mm_and_si128, _mm_cvtsi32_si128, _mm_xor_si128};
    // SAFETY: offsets 0 and target, plus 16, are at most target + 16 = len.
    let (first, last) = unsafe { (load16(src), load16(src.add(f.target))) };
    let first = _mm_xor_si128(
        _mm_and_si128(first, keys16(&f.first_mask)),
        _mm_cvtsi32_si128(!initial as i32),
    );
    _mm_xor_si128(last, fold(first, keys16(&f.first_keys)))
}

/// The CRC of a span whose blocks were all folded onto its last 16 bytes, `x`: those
/// 16 bytes folded to 8, then 4, then divided by the polynomial (Barrett reduction,
/// with the quotient's reflected reciprocal `MU`), and the register inverted.
///
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
fn reduce(x: std::arch::x86_64::__m128i) -> u32 {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtsi128_si32, _mm_set_epi64x, _mm_srli_si128,
        _mm_xor_si128,
    };
    let low32 = _mm_set_epi64x(0, 0xffff_ffff);
    // The low lane moved 64 bits on, onto the high lane's bits.
    let k = _mm_set_epi64x(0, const { key(96) } as i64);
    let x = _mm_xor_si128(_mm_clmulepi64_si128::<0x00>(x, k), _mm_srli_si128::<8>(x));
    // The low 32 bits moved 32 on.
    let k = _mm_set_epi64x(0, const { key(64) } as i64);
    let x = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(_mm_and_si128(x, low32), k),
        _mm_srli_si128::<4>(x),
    );
    // Barrett: the quotient's estimate from the low 32 bits, times the polynomial,
    // cancels them, leaving the remainder in the next 32.
    let pm = _mm_set_epi64x(MU as i64, POLY_REFLECTED as i64);
    let t = _mm_clmulepi64_si128::<0x10>(_mm_and_si128(x, low32), pm);
    let t = _mm_clmulepi64_si128::<0x00>(_mm_and_si128(t, low32), pm);
    let r = _mm_srli_si128::<4>(_mm_xor_si128(x, t));
    !(_mm_cvtsi128_si32(r) as u32)
}

/// A 16-byte block folded by the lane multipliers `k` (see [`keys`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
#[inline]
fn fold(
    x: std::arch::x86_64::__m128i,
    k: std::arch::x86_64::__m128i,
) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_xor_si128};
    _mm_xor_si128(
        _mm_clmulepi64_si128::<0x00>(x, k),
        _mm_clmulepi64_si128::<0x11>(x, k),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(initial: u32, bytes: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(initial);
        h.update(bytes);
        h.finalize()
    }

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn the_reduction_constants_are_the_polynomials() {
        let reflect33 = |v: u64| v.reverse_bits() >> 31;
        assert_eq!(reflect33(POLY), POLY_REFLECTED);
        // floor(x^64 / POLY) by long division over GF(2).
        let (mut n, mut q) = (1u128 << 64, 0u128);
        while n.ilog2() >= 32 {
            let s = n.ilog2() - 32;
            q |= 1 << s;
            n ^= u128::from(POLY) << s;
        }
        assert_eq!(reflect33(q as u64), MU);
    }

    #[test]
    fn the_fold_constants_are_the_published_ones() {
        // Folding by 16 and by 64 bytes in the Intel method use these four.
        assert_eq!(keys(128), [0x1_7519_97d0, 0x0_ccaa_009e]);
        assert_eq!(keys(512), [0x1_5444_2bd4, 0x1_c6e4_1596]);
    }

    #[test]
    fn every_length_and_initial_value_gives_crc32fasts_checksum() {
        // Every length to past three windows, the boundaries of a window and of the
        // 32-byte floor included, with initial values that set every bit.
        let lengths = (0..3 * WINDOW + 40).chain([28_237, 65_536 + 7]);
        for (n, len) in lengths.enumerate() {
            let data = bytes(len, n as u64);
            let crc = SpanCrc::new(len);
            for initial in [0, u32::MAX, 0x8000_0001, n as u32] {
                let want = reference(initial, &data);
                // SAFETY: `data` holds `len` bytes.
                let got = unsafe { crc.crc_at(initial, data.as_ptr()) };
                assert_eq!(got, want, "len {len}, initial {initial:#x}");
                // Each path this CPU has, whichever `crc_at` chose.
                // SAFETY: as above.
                let portable = unsafe { copied(initial, data.as_ptr(), len) };
                assert_eq!(portable, want, "portable path, len {len}");
                #[cfg(target_arch = "x86_64")]
                if let Some(f) = &crc.folds {
                    // SAFETY: `folds` exists where the CPU has PCLMULQDQ; `data` holds
                    // `len` bytes.
                    let narrow = unsafe { folded(f, initial, data.as_ptr()) };
                    assert_eq!(narrow, want, "128-bit path, len {len}");
                    if f.width != Width::One {
                        // SAFETY: a width above one is set only where the CPU has the
                        // 256-bit forms (`clmul_width` asks for AVX2 with AVX-512).
                        let wide = unsafe { folded_wide(f, initial, data.as_ptr()) };
                        assert_eq!(wide, want, "256-bit path, len {len}");
                    }
                    if f.width == Width::Four {
                        // SAFETY: `Four` is set where the CPU has the 512-bit forms.
                        let w512 = unsafe { folded_512(f, initial, data.as_ptr()) };
                        assert_eq!(w512, want, "512-bit path, len {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_changes_the_checksum() {
        for len in [32, 165, 1000, 2 * WINDOW + 17] {
            let mut data = bytes(len, 7);
            let crc = SpanCrc::new(len);
            // SAFETY: `data` holds `len` bytes.
            let good = unsafe { crc.crc_at(5, data.as_ptr()) };
            for bit in (0..len * 8).step_by(37) {
                data[bit / 8] ^= 1 << (bit % 8);
                // SAFETY: as above.
                let flipped = unsafe { crc.crc_at(5, data.as_ptr()) };
                assert_ne!(flipped, good, "len {len} bit {bit}");
                data[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }
}
