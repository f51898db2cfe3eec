//! Reading a batch's reply into its result sets.
//!
//! A reply is a stream of items: a column-metadata token opens each result set, and rows
//! follow it. [`Sets`] groups those items into one `Vec` per result set; [`read_sets`] feeds
//! it a tiberius `QueryStream`. The grouping is kept apart from tiberius' types so that its
//! tests can build any sequence of items without a server.

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
    /// Takes the next item of the reply.
    pub fn push(&mut self, item: Item<R>) {
        match item {
            Item::Set => match self.current.take() {
                None => self.current = Some(Vec::new()),
                Some(previous) => self.done.push(previous),
            },
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
