//! Reading a batch's reply into its result sets.
//!
//! A reply is a stream of items: a column-metadata token opens each result set, and rows
//! follow it. [`Sets`] groups those items into one `Vec` per result set, an empty set being a
//! set like any other, wherever it comes; [`read_sets`] feeds it a tiberius `QueryStream`.
//!
//! Not tiberius' `QueryStream::into_results`: in tiberius 0.12.3 it drops an empty result set
//! that follows another one (on the second column-metadata token it pushes the first set and
//! only starts the next one at its first row), so "rows, then an empty set" came back as one
//! set (issue 37: every `complete_and_claim` that claimed nothing failed with "expected 2
//! result sets, got 1"), and a one-set reader taking the last set got the earlier one. The
//! grouping is kept apart from tiberius' types (whose rows only the driver can build) so that
//! its tests feed it any sequence of items without a server.

use futures::TryStreamExt;
use tiberius::{QueryItem, QueryStream, Row};

/// One item of a reply: the start of a result set (its column-metadata token), or a row of
/// the current set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Item<R> {
    Set,
    Row(R),
}

/// Result sets in the order the reply sent them.
#[derive(Debug)]
pub(crate) struct Sets<R> {
    done: Vec<Vec<R>>,
    current: Option<Vec<R>>,
}

impl<R> Default for Sets<R> {
    fn default() -> Self {
        Sets { done: Vec::new(), current: None }
    }
}

impl<R> Sets<R> {
    /// Takes the next item of the reply. Every `Set` opens a set of its own, whether rows
    /// follow it or not.
    pub fn push(&mut self, item: Item<R>) {
        match item {
            Item::Set => self.done.extend(self.current.replace(Vec::new())),
            Item::Row(row) => self.current.get_or_insert_with(Vec::new).push(row),
        }
    }

    /// The result sets.
    pub fn finish(mut self) -> Vec<Vec<R>> {
        self.done.extend(self.current.take());
        self.done
    }

    /// The result sets of `items`.
    #[cfg(test)]
    pub fn of(items: impl IntoIterator<Item = Item<R>>) -> Vec<Vec<R>> {
        let mut sets = Sets::default();
        for item in items {
            sets.push(item);
        }
        sets.finish()
    }
}

/// Reads a whole reply into its result sets.
pub(crate) async fn read_sets(mut stream: QueryStream<'_>) -> tiberius::Result<Vec<Vec<Row>>> {
    let mut sets = Sets::default();
    while let Some(item) = stream.try_next().await? {
        sets.push(match item {
            QueryItem::Metadata(_) => Item::Set,
            QueryItem::Row(row) => Item::Row(row),
        });
    }
    Ok(sets.finish())
}

#[cfg(test)]
mod tests {
    use super::Item::{Row as R, Set as S};
    use super::*;

    /// Issue 37: every result set the reply opens is one set, empty or not, in any position
    /// (tiberius 0.12.3's `into_results` dropped an empty set that follows another one).
    #[test]
    fn every_set_counts_empty_or_not_in_any_position() {
        for (what, items, want) in [
            ("nothing", vec![], vec![]),
            ("one empty set", vec![S], vec![vec![]]),
            ("one set of rows", vec![S, R(1), R(2)], vec![vec![1, 2]]),
            ("rows, then an empty set", vec![S, R(1), S], vec![vec![1], vec![]]),
            ("an empty set, then rows", vec![S, S, R(2)], vec![vec![], vec![2]]),
            ("an empty set, then an empty set", vec![S, S], vec![vec![], vec![]]),
            ("rows, then rows", vec![S, R(1), S, R(2), R(3)], vec![vec![1], vec![2, 3]]),
            ("rows, an empty set, rows", vec![S, R(1), S, S, R(3)], vec![vec![1], vec![], vec![3]]),
            ("rows, rows, an empty set", vec![S, R(1), S, R(2), S], vec![vec![1], vec![2], vec![]]),
        ] {
            assert_eq!(Sets::of(items), want, "{what}");
        }
    }

    /// The one-set readers (`rows::last_set`, `rows::first_row`) read the LAST set the reply
    /// sent, even when it is empty and an earlier one is not.
    #[test]
    fn the_last_set_is_the_last_one_sent_even_when_empty() {
        assert_eq!(crate::rows::last_set(Sets::of([S, R(1), S])), Vec::<i32>::new());
        assert_eq!(crate::rows::last_set(Sets::of([S, S, R(2)])), vec![2]);
    }
}
