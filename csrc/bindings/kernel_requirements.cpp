// csrc/bindings/kernel_requirements.cpp: parses and prints the requirement dicts of implementations.
#include "kernel_requirements.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <string>
#include <vector>

namespace turbo_physai::bindings {
namespace {

constexpr const char *kKeys = "device, dtype, contiguous, rank, graph_capture, args";

struct Context {
    const std::string &slot, &impl;
    std::string where(const std::string &key) const {
        return "requires['" + key + "'] of implementation '" + impl + "' for slot '" + slot + "'";
    }
};

// A string or a sequence of strings, each parsed by `parse`, OR-ed into a bit mask.
template <class Parse>
std::uint32_t names_mask(nb::handle value, const Context &ctx, const char *key, Parse parse) {
    std::vector<std::string> names;
    if (nb::isinstance<nb::str>(value)) {
        names.push_back(nb::cast<std::string>(value));
    } else {
        try {
            for (nb::handle item : nb::iter(value))
                names.push_back(nb::cast<std::string>(item));
        } catch (const std::exception &) {
            PyErr_Clear();
            throw nb::type_error((ctx.where(key) + " must be a name or a list of names").c_str());
        }
    }
    std::uint32_t mask = 0;
    for (const std::string &n : names) {
        try {
            mask |= 1u << static_cast<unsigned>(parse(n));
        } catch (const std::invalid_argument &e) {
            throw nb::value_error((ctx.where(key) + ": " + e.what()).c_str());
        }
    }
    return mask;
}

bool as_bool(nb::handle value, const Context &ctx, const char *key) {
    if (!PyBool_Check(value.ptr()))
        throw nb::type_error((ctx.where(key) + " must be True or False").c_str());
    return value.ptr() == Py_True;
}

int as_int(nb::handle value, const Context &ctx, const char *key) {
    if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
        throw nb::type_error((ctx.where(key) + " must hold integers").c_str());
    int overflow = 0;
    const long v = PyLong_AsLongAndOverflow(value.ptr(), &overflow);
    constexpr long kLimit = 1 << 20;  // far above any rank or argument count
    if (overflow || v > kLimit || v < -kLimit)
        throw nb::value_error((ctx.where(key) + " holds an integer out of range").c_str());
    return static_cast<int>(v);
}

}  // namespace

Requirements parse_requirements(nb::handle spec, const std::string &slot, const std::string &impl) {
    const Context ctx{slot, impl};
    if (!nb::isinstance<nb::dict>(spec))
        throw nb::type_error(("requires of implementation '" + impl + "' for slot '" + slot +
                              "' must be a dict with keys " + kKeys)
                                 .c_str());
    Requirements req;
    for (auto [k, value] : nb::borrow<nb::dict>(spec)) {
        const std::string key = nb::cast<std::string>(nb::str(k));
        if (key == "device") {
            req.devices = names_mask(value, ctx, "device", device_from_name);
        } else if (key == "dtype") {
            req.dtypes = names_mask(value, ctx, "dtype", dtype_from_name);
        } else if (key == "contiguous") {
            req.contiguous = as_bool(value, ctx, "contiguous");
        } else if (key == "graph_capture") {
            req.graph_capture = as_bool(value, ctx, "graph_capture");
        } else if (key == "rank") {
            if (PyLong_Check(value.ptr())) {
                req.min_rank = req.max_rank = as_int(value, ctx, "rank");
            } else if (nb::isinstance<nb::tuple>(value) && nb::len(value) == 2) {
                nb::tuple bounds = nb::borrow<nb::tuple>(value);
                req.min_rank = bounds[0].is_none() ? 0 : as_int(bounds[0], ctx, "rank");
                req.max_rank = bounds[1].is_none() ? -1 : as_int(bounds[1], ctx, "rank");
            } else {
                throw nb::type_error(
                    (ctx.where("rank") + " must be an int or a (min, max) tuple").c_str());
            }
            if (req.min_rank < 0 || (req.max_rank >= 0 && req.max_rank < req.min_rank))
                throw nb::value_error((ctx.where("rank") + " is an empty range").c_str());
        } else if (key == "args") {
            if (!nb::isinstance<nb::list>(value) && !nb::isinstance<nb::tuple>(value))
                throw nb::type_error((ctx.where("args") + " must be a list of indices").c_str());
            for (nb::handle item : nb::iter(value)) {
                const int index = as_int(item, ctx, "args");
                if (index < 0)
                    throw nb::value_error((ctx.where("args") + " must be >= 0").c_str());
                if (std::find(req.args.begin(), req.args.end(), index) != req.args.end())
                    throw nb::value_error(
                        (ctx.where("args") + " names index " + std::to_string(index) + " twice")
                            .c_str());
                req.args.push_back(index);
            }
            // An empty list would read as "every tensor argument", the opposite of its spelling.
            if (req.args.empty())
                throw nb::value_error((ctx.where("args") + " must name at least one index "
                                       "(leave it out to check every tensor argument)")
                                          .c_str());
        } else {
            throw nb::value_error(("requires of implementation '" + impl + "' for slot '" + slot +
                                   "': unknown key '" + key + "' (expected " + kKeys + ")")
                                      .c_str());
        }
    }
    return req;
}

nb::dict requirements_dict(const Requirements &req) {
    nb::dict d;
    auto names = [](std::uint32_t mask, auto name_of, int count) {
        nb::list out;
        for (int i = 0; i < count; ++i)
            if (mask & (1u << i))
                out.append(name_of(i));
        return out;
    };
    if (req.devices)
        d["device"] = names(req.devices, [](int i) { return device_name(Device(i)); },
                            static_cast<int>(Device::other) + 1);
    if (req.dtypes)
        d["dtype"] = names(req.dtypes, [](int i) { return dtype_name(DType(i)); },
                           static_cast<int>(DType::other) + 1);
    if (req.contiguous)
        d["contiguous"] = true;
    if (req.min_rank > 0 || req.max_rank >= 0)
        d["rank"] = nb::make_tuple(req.min_rank,
                                   req.max_rank < 0 ? nb::object(nb::none())
                                                    : nb::object(nb::int_(req.max_rank)));
    if (!req.graph_capture)
        d["graph_capture"] = false;
    if (!req.args.empty()) {
        nb::list args;
        for (int i : req.args)
            args.append(i);
        d["args"] = args;
    }
    return d;
}

}  // namespace turbo_physai::bindings
