package org.ledgerdeletion.broker;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;

/**
 * Everything that differs between Pulsar lines about the running broker's {@code MetaStore}, found at start from
 * the interface itself, so the extension binds to none of it at compile time:
 * <ul>
 *   <li>the methods {@link MarkingMetaStore} intercepts (the same names and arities on every line, but their
 *       parameter types are the line's metadata classes), called reflectively;</li>
 *   <li>the metadata classes, which the extension turns into their serialized bytes (and back, for what it
 *       writes itself) and reads as bytes ({@link LedgerList}, {@link CursorLedgers}):
 *       {@link Line#PROTOBUF}, Pulsar 4.0 and 4.1, protobuf-java's immutable {@code MLDataFormats} classes
 *       ({@code toByteArray()}, static {@code parseFrom(byte[])}); {@link Line#LIGHTPROTO}, Pulsar 4.2 and later,
 *       LightProto's mutable {@code org.apache.bookkeeper.mledger.proto} classes ({@code toByteArray()}, a new
 *       object's {@code parseFrom(byte[])}). Pulsar reuses LightProto objects, so nothing is kept past a call but
 *       bytes.</li>
 * </ul>
 */
final class MetaStoreAdapter {

    /** Which generated-code flavour this Pulsar line's metadata classes are. */
    enum Line {
        PROTOBUF("protobuf-java MLDataFormats (Pulsar 4.0, 4.1)"),
        LIGHTPROTO("LightProto (Pulsar 4.2 and later)");

        private final String description;

        Line(String description) {
            this.description = description;
        }
    }

    private final Line line;
    private final Codec ledgerInfo;
    private final Codec cursorInfo;
    final Method getManagedLedgerInfo;
    final Method asyncUpdateLedgerIds;
    final Method asyncGetCursorInfo;
    final Method asyncUpdateCursorInfo;
    final Method asyncRemoveCursor;
    final Method removeManagedLedger;

    private MetaStoreAdapter(Class<?> metaStore) {
        getManagedLedgerInfo = method(metaStore, "getManagedLedgerInfo", 4);
        asyncUpdateLedgerIds = method(metaStore, "asyncUpdateLedgerIds", 4);
        asyncGetCursorInfo = method(metaStore, "asyncGetCursorInfo", 3);
        asyncUpdateCursorInfo = method(metaStore, "asyncUpdateCursorInfo", 5);
        asyncRemoveCursor = method(metaStore, "asyncRemoveCursor", 3);
        removeManagedLedger = method(metaStore, "removeManagedLedger", 2);
        Class<?> ledgerInfoClass = asyncUpdateLedgerIds.getParameterTypes()[1];
        Class<?> cursorInfoClass = asyncUpdateCursorInfo.getParameterTypes()[2];
        line = hasStaticParseFrom(ledgerInfoClass) ? Line.PROTOBUF : Line.LIGHTPROTO;
        ledgerInfo = Codec.of(ledgerInfoClass, line);
        cursorInfo = Codec.of(cursorInfoClass, line);
    }

    /**
     * The adapter of the {@code MetaStore} interface given (the broker's own); fails, naming what is missing, on
     * a Pulsar whose interface lacks a method the extension intercepts.
     */
    static MetaStoreAdapter of(Class<?> metaStore) {
        return new MetaStoreAdapter(metaStore);
    }

    /** Calls {@code method} on {@code target}; what it throws is thrown as it is. */
    static Object call(Method method, Object target, Object... args) {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw sneaky(e.getCause());
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    @SuppressWarnings("unchecked")
    private static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
        throw (E) e;
    }

    Line line() {
        return line;
    }

    String describe() {
        return line.description + ": " + ledgerInfo.type.getName() + ", " + cursorInfo.type.getName();
    }

    byte[] ledgerInfoBytes(Object info) {
        return ledgerInfo.toBytes(info);
    }

    Object ledgerInfo(byte[] bytes) {
        return ledgerInfo.parse(bytes);
    }

    byte[] cursorInfoBytes(Object info) {
        return cursorInfo.toBytes(info);
    }

    Object cursorInfo(byte[] bytes) {
        return cursorInfo.parse(bytes);
    }

    private static Method method(Class<?> iface, String method, int arity) {
        for (Method m : iface.getMethods()) {
            if (m.getName().equals(method) && m.getParameterCount() == arity) {
                return m;
            }
        }
        throw new UnsupportedOperationException(iface.getName() + " has no " + method + " with " + arity
                + " parameters: this Pulsar version is not supported by the ledger-deletion extension");
    }

    private static boolean hasStaticParseFrom(Class<?> type) {
        try {
            return Modifier.isStatic(type.getMethod("parseFrom", byte[].class).getModifiers());
        } catch (NoSuchMethodException e) {
            return false;
        }
    }

    /**
     * Serializing and parsing one metadata class: {@code parse} is protobuf's static {@code parseFrom(byte[])}, or
     * LightProto's constructor followed by {@code parseFrom(byte[])} and {@code materialize()} (which decodes its
     * strings at once: the object then no longer needs the bytes).
     */
    private record Codec(Class<?> type, MethodHandle toBytes, MethodHandle parseStatic, MethodHandle create,
                         MethodHandle parseInto, MethodHandle materialize) {
        static Codec of(Class<?> type, Line line) {
            MethodHandles.Lookup lookup = MethodHandles.publicLookup();
            try {
                MethodHandle toBytes = lookup.findVirtual(type, "toByteArray", MethodType.methodType(byte[].class));
                if (line == Line.PROTOBUF) {
                    return new Codec(type, toBytes,
                            lookup.findStatic(type, "parseFrom", MethodType.methodType(type, byte[].class)),
                            null, null, null);
                }
                return new Codec(type, toBytes, null,
                        lookup.findConstructor(type, MethodType.methodType(void.class)),
                        lookup.findVirtual(type, "parseFrom", MethodType.methodType(void.class, byte[].class)),
                        lookup.findVirtual(type, "materialize", MethodType.methodType(void.class)));
            } catch (ReflectiveOperationException e) {
                throw new UnsupportedOperationException("cannot serialize " + type.getName() + " (" + e
                        + "): this Pulsar version is not supported by the ledger-deletion extension", e);
            }
        }

        byte[] toBytes(Object info) {
            try {
                return (byte[]) toBytes.invoke(info);
            } catch (RuntimeException | Error e) {
                throw e;
            } catch (Throwable e) {
                throw new IllegalStateException(e);
            }
        }

        Object parse(byte[] bytes) {
            try {
                if (parseStatic != null) {
                    return parseStatic.invoke(bytes);
                }
                Object o = create.invoke();
                parseInto.invoke(o, bytes);
                materialize.invoke(o);
                return o;
            } catch (RuntimeException | Error e) {
                throw e;
            } catch (Throwable e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
