//! Paged attention from the DSL, on the CPU reference engine: a `graph!` paged decode computes
//! what the dense graph computes over the pages its table names, and a table that names a page
//! outside the pool is an error naming the port, the sequence and the slot, never a read.

use crate::common;

use common::random;
use cudnn_graph::graph;
use half::bf16;

graph! {
    /// Paged decode: 4 query heads over 2 KV heads, pages of 4 tokens.
    pub Paged<dyn B, dyn P, dyn T>(
        q: bf16[B, 4, 1, 16],
        k_pool: bf16[P, 2, 4, 16],
        v_pool: bf16[P, 2, 4, 16],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, T, 1],
    ) -> (o: bf16[B, 4, 1, 16]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true);
    }

    /// The same attention over dense K and V.
    pub Dense<dyn B, dyn S>(
        q: bf16[B, 4, 1, 16],
        k: bf16[B, 2, S, 16],
        v: bf16[B, 2, S, 16],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
    ) -> (o: bf16[B, 4, 1, 16]) {
        o = sdpa(q, k, v, seq_q, seq_kv, padding_mask = true);
    }
}

/// `[B, 2, T·4, 16]` K or V gathered from `pool` (`[P, 2, 4, 16]`) through `table`.
fn gather(pool: &[bf16], table: &[i32], b: usize, width: usize) -> Vec<bf16> {
    let s = width * 4;
    let mut out = vec![bf16::ZERO; b * 2 * s * 16];
    for seq in 0..b {
        for j in 0..s {
            let page = table[seq * width + j / 4] as usize;
            for h in 0..2 {
                let src = ((page * 2 + h) * 4 + j % 4) * 16;
                let dst = ((seq * 2 + h) * s + j) * 16;
                out[dst..dst + 16].copy_from_slice(&pool[src..src + 16]);
            }
        }
    }
    out
}

/// Fixed-seed Q (`[b, 4, 1, 16]`) and K, V pools of `pages` pages.
fn q_and_pools(b: usize, pages: usize) -> [Vec<bf16>; 3] {
    [random(1, b * 4 * 16), random(2, pages * 2 * 4 * 16), random(3, pages * 2 * 4 * 16)]
}

/// The paged graph's reference: one query per sequence, `table` `b × width`.
fn paged(
    [q, k_pool, v_pool]: &[Vec<bf16>; 3],
    table: &[i32],
    seq_kv: &[i32],
    width: usize,
    pages: usize,
) -> Result<Vec<bf16>, cudnn_graph::Error> {
    let seq_q = vec![1i32; seq_kv.len()];
    let inputs = PagedInputs { q, k_pool, v_pool, seq_q: &seq_q, seq_kv, table };
    Ok(Paged::new(seq_kv.len(), pages, width).reference(inputs)?.o)
}

#[test]
fn paged_decode_is_dense_attention_over_its_pages() {
    let (width, pages) = (5, 17);
    let qkv = q_and_pools(3, pages);
    // Pages out of order, one pool page (16) never named.
    let table: Vec<i32> = vec![3, 9, 0, 12, 7, 1, 15, 2, 8, 4, 11, 5, 13, 6, 10];
    let seq_kv = vec![20i32, 3, 11];
    let got = paged(&qkv, &table, &seq_kv, width, pages).unwrap();
    let [q, k_pool, v_pool] = &qkv;
    let b = seq_kv.len();
    let (k, v) = (gather(k_pool, &table, b, width), gather(v_pool, &table, b, width));
    let seq_q = vec![1i32; b];
    let dense =
        Dense::new(b, width * 4).reference(DenseInputs { q, k: &k, v: &v, seq_q: &seq_q, seq_kv: &seq_kv }).unwrap().o;
    assert_eq!(got, dense);
}

#[test]
fn a_page_outside_the_pool_is_an_error_not_a_read() {
    let (width, pages) = (3, 6);
    let table: Vec<i32> = vec![0, 1, 2, 3, 6, 5];
    let e = paged(&q_and_pools(2, pages), &table, &[12, 9], width, pages).unwrap_err().to_string();
    assert!(
        e.contains(
            "Page_table_K[1, 0, 1, 0] = 6 names no page of the K pool, which has 6 pages (0..6); sequence 1, slot 1"
        ),
        "{e}"
    );
}
