// csrc/core/src/kernel_registry.cpp: names of devices and dtypes, the override variables.
#include "turbo_physai/kernel_registry.h"

#include <cctype>
#include <cstdlib>

namespace turbo_physai {
namespace {

constexpr const char *kDeviceNames[] = {"cpu", "cuda", "meta", "mps", "xpu", "other"};
constexpr const char *kDTypeNames[] = {
    "bool",    "uint8",   "int8",          "int16",       "int32",     "int64",      "float16",
    "bfloat16", "float32", "float64",      "float8_e4m3fn", "float8_e5m2", "complex64",
    "complex128", "other"};

template <class Enum, std::size_t N>
Enum parse_name(const char *const (&names)[N], const std::string &name, const char *what) {
    for (std::size_t i = 0; i < N; ++i)
        if (name == names[i])
            return static_cast<Enum>(i);
    std::string msg = std::string("unknown ") + what + " '" + name + "' (expected one of:";
    for (const char *n : names)
        msg += std::string(" ") + n;
    throw std::invalid_argument(msg + ")");
}

std::string trimmed(const char *value) {
    const std::string s = value ? value : "";
    const auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string::npos)
        return "";
    return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::string lowered(std::string s) {
    for (char &c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

Device device_from_name(const std::string &name) {
    return parse_name<Device>(kDeviceNames, name, "device");
}
DType dtype_from_name(const std::string &name) {
    return parse_name<DType>(kDTypeNames, name, "dtype");
}
const char *device_name(Device device) { return kDeviceNames[static_cast<int>(device)]; }
const char *dtype_name(DType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }

void check_slot_name(const std::string &slot) {
    if (slot.empty())
        throw std::invalid_argument("a kernel slot name must not be empty");
    if (trimmed(slot.c_str()) != slot)
        throw std::invalid_argument("kernel slot name '" + slot +
                                    "' must not start or end with whitespace");
}

void check_names(const std::string &slot, const std::string &impl) {
    check_slot_name(slot);
    const std::string where = "slot '" + slot + "': implementation name";
    if (impl.empty())
        throw std::invalid_argument(where + " must not be empty");
    if (trimmed(impl.c_str()) != impl)
        throw std::invalid_argument(where + " '" + impl +
                                    "' must not start or end with whitespace");
    const std::string lower = lowered(impl);
    if (lower == "off" || (lower == ImplInfo::kReference && impl != ImplInfo::kReference))
        throw std::invalid_argument(where + " '" + impl + "' is reserved: " +
                                    Selection::kKernelsVar + "=" + impl +
                                    " selects the references only");
}

Selection Selection::parse(const char *kernels, const char *hub) {
    Selection sel;
    // Implementation names are matched as written (trimmed); off/reference in any case.
    const std::string value = trimmed(kernels);
    if (lowered(value) == "off" || lowered(value) == "reference") {
        sel.mode = Mode::reference_only;
    } else if (!value.empty()) {
        sel.mode = Mode::named;
        sel.name = value;
    }
    const std::string h = lowered(trimmed(hub));
    sel.hub = !(h == "0" || h == "false" || h == "off" || h == "no");
    return sel;
}

bool Selection::admits(const ImplInfo &info) const {
    if (info.is_reference())
        return true;
    if (info.hub && !hub)
        return false;
    switch (mode) {
    case Mode::all:
        return true;
    case Mode::reference_only:
        return false;
    case Mode::named:
        return info.name == name;
    }
    return false;
}

bool EnvironmentWatch::refresh() {
    // getenv sees os.environ writes (CPython calls putenv), so no Python round trip is needed.
    const char *now[2] = {std::getenv(Selection::kKernelsVar), std::getenv(Selection::kHubVar)};
    bool changed = !seen_;
    for (int i = 0; i < 2; ++i) {
        const bool set = now[i] != nullptr;
        if (set != set_[i] || (set && values_[i] != now[i])) {
            changed = true;
            set_[i] = set;
            values_[i] = set ? now[i] : "";
        }
    }
    if (changed) {
        seen_ = true;
        selection_ = Selection::parse(set_[0] ? values_[0].c_str() : nullptr,
                                      set_[1] ? values_[1].c_str() : nullptr);
    }
    return changed;
}

}  // namespace turbo_physai
