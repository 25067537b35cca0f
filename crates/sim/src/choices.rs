//! The world's one source of choices: a seeded `StdRng`, or fuzz bytes in front of one.
//!
//! Every random choice of a run (delays, faults, the simulated clients' requests, the clocks'
//! skew) goes through [`Choices`], which implements `RngCore`. Seeded, it hands every call
//! straight to `StdRng::seed_from_u64(seed)`, so a seed's run is exactly what it was before this
//! type existed (`a_seed_replays_exactly`). Given bytes (`warden_sim::fuzz`), each call takes the
//! next byte, repeated over the whole value (so `gen_bool`, and `gen_range` unless its rejection
//! step asks again, are decided by one byte), until the bytes run out; then the fixed RNG decides.

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

pub(crate) struct Choices {
    bytes: Vec<u8>,
    pos: usize,
    rng: StdRng,
}

impl Choices {
    pub(crate) fn seeded(seed: u64) -> Choices {
        Choices { bytes: Vec::new(), pos: 0, rng: StdRng::seed_from_u64(seed) }
    }

    /// Choices taken from `bytes` first, then from the RNG seeded with `seed`.
    pub(crate) fn from_bytes(bytes: &[u8], seed: u64) -> Choices {
        Choices { bytes: bytes.to_vec(), pos: 0, rng: StdRng::seed_from_u64(seed) }
    }

    fn next_byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
}

impl RngCore for Choices {
    fn next_u32(&mut self) -> u32 {
        match self.next_byte() {
            Some(b) => u32::from_ne_bytes([b; 4]),
            None => self.rng.next_u32(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        match self.next_byte() {
            Some(b) => u64::from_ne_bytes([b; 8]),
            None => self.rng.next_u64(),
        }
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for i in 0..dest.len() {
            match self.next_byte() {
                Some(b) => dest[i] = b,
                None => return self.rng.fill_bytes(&mut dest[i..]),
            }
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn seeded_choices_are_the_seeded_rng() {
        let (mut a, mut b) = (Choices::seeded(7), StdRng::seed_from_u64(7));
        for _ in 0..100 {
            assert_eq!(a.gen_range(0..1_000u64), b.gen_range(0..1_000u64));
            assert_eq!(a.gen_bool(0.3), b.gen_bool(0.3));
            assert_eq!(a.gen::<u64>(), b.gen::<u64>());
        }
    }

    #[test]
    fn bytes_decide_the_choices_then_the_rng_takes_over() {
        let mut c = Choices::from_bytes(&[0, 0, 255], 1);
        assert_eq!(c.gen_range(0..10u32), 0);
        assert!(c.gen_bool(0.3));
        assert!(!c.gen_bool(0.3));
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(c.gen::<u64>(), rng.gen::<u64>());
    }
}
