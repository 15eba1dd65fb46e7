package provider

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newMemberResource() resource.Resource { return &memberResource{} }

type memberResource struct{ base }

type memberModel struct {
	ID       types.String `tfsdk:"id"`
	Tenant   types.String `tfsdk:"tenant"`
	Username types.String `tfsdk:"username"`
	Email    types.String `tfsdk:"email"`
	Role     types.String `tfsdk:"role"`
	Subject  types.String `tfsdk:"subject"`
	Status   types.String `tfsdk:"status"`
}

type memberJSON struct {
	ID       int64  `json:"id"`
	Tenant   string `json:"tenant"`
	Username string `json:"username"`
	Email    string `json:"email"`
	Role     string `json:"role"`
	Subject  string `json:"subject"`
	Status   string `json:"status"`
}

func (r *memberResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_member"
}

func (r *memberResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A person's role in a tenant. Creating invites them (the identity provider's user is made if " +
			"missing; they choose a password on first login); destroying removes the role. Needs the tenant-admin " +
			"role. Changing `tenant`, `username` or `email` replaces the membership; `role` changes in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The membership's numeric id."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"username": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The person's login name in the identity provider."},
			"email": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "Their email address (for a new user)."},
			"role": schema.StringAttribute{Required: true,
				Validators:  []validator.String{stringvalidator.OneOf(roles...)},
				Description: "`tenant-admin`, `developer` or `viewer`."},
			"subject": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "Their tokens' `sub`: the principal topic ACLs name."},
			"status": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The membership's status."},
		},
	}
}

func (r *memberResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func memberState(m memberJSON) memberModel {
	return memberModel{
		ID:       types.StringValue(strconv.FormatInt(m.ID, 10)),
		Tenant:   types.StringValue(m.Tenant),
		Username: types.StringValue(m.Username),
		Email:    types.StringValue(m.Email),
		Role:     types.StringValue(m.Role),
		Subject:  types.StringValue(m.Subject),
		Status:   types.StringValue(m.Status),
	}
}

func (r *memberResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan memberModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("username", plan.Username)
	b.str("email", plan.Email)
	b.str("role", plan.Role)
	var created memberJSON
	if err := r.client.Post(ctx, "members", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not invite the member", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, memberState(created))...)
}

func (r *memberResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state memberModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var member memberJSON
	err := r.client.Get(ctx, "members/"+escape(state.ID.ValueString()), nil, &member)
	gone, err := r.client.Gone(ctx, err, state.Tenant.ValueString())
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the member", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, memberState(member))...)
}

func (r *memberResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state memberModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var member memberJSON
	b := body{"role": plan.Role.ValueString()}
	if err := r.client.Patch(ctx, "members/"+escape(state.ID.ValueString()), nil, b, &member); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the member's role", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, memberState(member))...)
}

func (r *memberResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state memberModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "members/"+escape(state.ID.ValueString()), nil), state.Tenant.ValueString())
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not remove the member", err, r.attrs())
	}
}

// ImportState takes the numeric id, or `<tenant>/<username>`.
func (r *memberResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	id := req.ID
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		tenant, username := splitScopedID(id)
		if tenant == "" || username == "" {
			resp.Diagnostics.AddError("Invalid import id",
				fmt.Sprintf("expected the membership's numeric id or <tenant>/<username>, got %q", id))
			return
		}
		members, err := List[memberJSON](ctx, r.client, "members", url.Values{"tenant": {tenant}, "username": {username}})
		if err != nil {
			addAPIError(&resp.Diagnostics, "Could not look the member up", err, nil)
			return
		}
		id = ""
		for _, member := range members {
			if member.Username == username {
				id = strconv.FormatInt(member.ID, 10)
			}
		}
		if id == "" {
			resp.Diagnostics.AddError("No such member", fmt.Sprintf("%q is not a member visible to these credentials", req.ID))
			return
		}
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), id)...)
}
