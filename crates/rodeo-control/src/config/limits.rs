//! The message size limits of a partition's data sockets: the largest message each kind of
//! socket legitimately receives ([`PartitionConfig::largest_messages`]), and the limit it
//! applies (`transport.max_message_bytes`, or derived from those with a margin).

use super::ros::RosInput;
use super::PartitionConfig;

/// The largest message each kind of data socket of a partition accepts, in bytes
/// ([`PartitionConfig::message_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// A logger's ROUTER: Event messages (a full event).
    pub logger: usize,
    /// A readout node's ROUTER: a DataRequest for every channel, a Clear of one group.
    pub ros: usize,
    /// The supervisor's sockets: Updates from the DCMs (credits and decisions).
    pub supervisor: usize,
    /// A DCM's sockets: a DataReply of a whole readout node, assignments, EventAcks.
    pub dcm: usize,
}

impl MessageLimits {
    /// The largest of the four.
    pub fn largest(&self) -> usize {
        self.logger.max(self.ros).max(self.supervisor).max(self.dcm)
    }
}

/// The smallest `transport.max_message_bytes` accepted (also the floor of a derived limit).
pub const MIN_MESSAGE_LIMIT: usize = 64 << 10;
/// Bytes assumed per ROB fragment when its size comes from outside the configuration (inputs
/// `replay`, `network`, `file`): 1 MiB, far above any detector's fragment.
pub const EXTERNAL_FRAGMENT_BYTES: usize = 1 << 20;

impl PartitionConfig {
    /// The largest message each kind of data socket legitimately receives in this partition,
    /// in bytes, without margin: a full event of every ROB (`ros.fragment_words` words each,
    /// or [`EXTERNAL_FRAGMENT_BYTES`] for inputs whose fragments come from outside) with its
    /// headers, a node's DataReply, a DataRequest for every channel, a Clear of one group, an
    /// Update or EventAck for every slot of a DCM (four times over: decisions kept while the
    /// supervisor does not read).
    pub fn largest_messages(&self) -> MessageLimits {
        use rodeo_transport::message::{clear_bytes, data_request_bytes, HEADER_BYTES};
        let r = &self.ros;
        let rob = match r.input {
            RosInput::Dma | RosInput::Swrod => {
                // ROB header with status words, ROD header and trailer: 64 words is generous.
                (r.fragment_words as usize)
                    .saturating_add(64)
                    .saturating_mul(4)
            }
            RosInput::Replay | RosInput::Network | RosInput::File => EXTERNAL_FRAGMENT_BYTES,
        };
        // Saturating throughout: `validate` asks this of counts their own sections refused
        // (any size TOML allows), and a wrapped product would pass for a small message.
        let robs = r.robs();
        let event = (HEADER_BYTES + 4 + 64 * 4).saturating_add(robs.saturating_mul(rob));
        let reply = (HEADER_BYTES + 8).saturating_add(r.channels.saturating_mul(rob));
        let decisions = self.dcm.slots.saturating_mul(4).saturating_add(4096);
        let update = (HEADER_BYTES + 8).saturating_add(decisions.saturating_mul(16));
        let ack = (HEADER_BYTES + 4).saturating_add(decisions.saturating_mul(8));
        let assignment = (HEADER_BYTES + 24).saturating_add(robs.saturating_mul(4));
        MessageLimits {
            logger: event,
            ros: data_request_bytes(r.channels).max(clear_bytes(self.supervisor.clear_group)),
            supervisor: update,
            dcm: reply.max(ack).max(assignment),
        }
    }

    /// The limit each kind of data socket applies to incoming messages: with
    /// `transport.max_message_bytes` set, that value for every socket; else per socket twice
    /// its [`PartitionConfig::largest_messages`] plus 64 KiB (at least [`MIN_MESSAGE_LIMIT`]).
    pub fn message_limits(&self) -> MessageLimits {
        if let Ok(n @ 1..) = usize::try_from(self.transport.max_message_bytes) {
            return MessageLimits {
                logger: n,
                ros: n,
                supervisor: n,
                dcm: n,
            };
        }
        let m = self.largest_messages();
        let margin = |b: usize| b.saturating_mul(2).saturating_add(64 << 10);
        MessageLimits {
            logger: margin(m.logger),
            ros: margin(m.ros),
            supervisor: margin(m.supervisor),
            dcm: margin(m.dcm),
        }
    }

    /// The limit of the control channel's sockets: 1 MiB (a configuration and a heartbeat
    /// are a few KiB), or `transport.max_message_bytes` when that is smaller.
    pub fn control_message_limit(&self, channel_limit: usize) -> usize {
        match usize::try_from(self.transport.max_message_bytes) {
            Ok(n @ 1..) => channel_limit.min(n),
            _ => channel_limit,
        }
    }
}
