//! A path that names something the engine did not make (a link, a FIFO, a folder where
//! a file belongs): the file kinds, and the payload an `io::Error` carries so that
//! `Error::io` can turn it into [`crate::Error::ForeignFile`]. Plain values: the calls
//! that find such a path are in `storage::confined`.

use std::fmt;
use std::io;

/// What a name is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// A named pipe.
    Fifo,
    /// A socket.
    Socket,
    /// A character or block device.
    Device,
    /// Anything else.
    Other,
}

impl Kind {
    /// The kind in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Link => "a symbolic link",
            Kind::Fifo => "a named pipe (FIFO)",
            Kind::Socket => "a socket",
            Kind::Device => "a device",
            Kind::Other => "a special file",
        }
    }
}

/// The payload of an [`io::Error`] saying a path names something the engine did not
/// make; `Error::io` turns it into [`crate::Error::ForeignFile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Foreign {
    /// What the path names (or, for a link met on the way, [`Kind::Link`]).
    pub found: Kind,
    /// What the engine keeps there.
    pub expected: Kind,
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "found {} where the engine keeps {} of its own (it follows no link and opens \
             no special file)",
            self.found.describe(),
            self.expected.describe()
        )
    }
}

impl std::error::Error for Foreign {}

/// An error saying `found` stands where the engine keeps an `expected`.
pub fn foreign(found: Kind, expected: Kind) -> io::Error {
    io::Error::other(Foreign { found, expected })
}

/// The [`Foreign`] payload of `e`, if it has one.
pub fn foreign_of(e: &io::Error) -> Option<Foreign> {
    e.get_ref()
        .and_then(|s| s.downcast_ref::<Foreign>())
        .copied()
}
