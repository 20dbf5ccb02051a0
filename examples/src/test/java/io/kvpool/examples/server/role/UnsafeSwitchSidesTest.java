package io.kvpool.examples.server.role;

import io.kvpool.KvPool;
import io.kvpool.examples.server.config.ServerConfig;
import io.kvpool.transfer.TransferReceiver;
import io.kvpool.transfer.TransferSafeguard;
import io.kvpool.transfer.TransferSender;
import org.junit.jupiter.api.Test;

import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** Each {@code --unsafe-} transfer switch reaches the engine whose safeguard it names, and only that one. */
class UnsafeSwitchSidesTest {

    @Test
    void eachTransferSwitchTurnsOffItsOwnSidesSafeguard() {
        for (TransferSafeguard s : TransferSafeguard.values()) {
            final ServerConfig cfg = ServerConfig.parse("--unsafe-" + s.name().toLowerCase().replace('_', '-'));
            try (KvPool prefill = RoleParts.prefillPool(cfg); KvPool decode = RoleParts.decodePool(cfg, null)) {
                final TransferSender sender = RoleParts.sender(cfg, prefill);
                final TransferReceiver receiver = RoleParts.receiver(cfg, decode);
                assertEquals(s.isSenderSide() ? Set.of(s) : Set.of(), sender.disabledSafeguards(), s::toString);
                assertEquals(s.isSenderSide() ? Set.of() : Set.of(s), receiver.disabledSafeguards(), s::toString);
                receiver.close();
                sender.close();
            }
        }
    }
}
